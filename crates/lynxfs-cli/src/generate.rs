//! `lynxfs generate`: the manual pages and shell completions, made from the same
//! clap definitions (and mount option table) that parse the command line, so they
//! never drift from `--help`. Hidden: `./lynx install` and `./lynx package` run it.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Arg, ArgAction, Command, CommandFactory};
use clap_mangen::roff::{bold, italic, roman, Roff};
use clap_mangen::Man;
use lynxfs_fuse::options::{OPTIONS, X_OPTIONS_HELP};

use crate::Cli;

/// The manual section of every page: system administration.
const SECTION: &str = "8";

#[derive(clap::Args)]
pub struct Args {
    /// Write the manual pages (lynxfs.8, lynxfs-SUBCOMMAND.8, mount.lynxfs.8) into DIR.
    #[arg(long, value_name = "DIR")]
    man: Option<PathBuf>,
    /// Print SHELL's completion script.
    #[arg(long, value_name = "SHELL")]
    completion: Option<clap_complete::Shell>,
}

/// The command line's definition, with what is generated at run time: `mount`'s
/// option list, from the table the mount code parses.
pub fn command() -> Command {
    Cli::command().mut_subcommand("mount", |m| {
        m.after_long_help(format!(
            "Mount options (-o, comma-separated):\n{}",
            lynxfs_fuse::options::as_text()
        ))
    })
}

pub fn run(args: &Args) -> Result<()> {
    if let Some(dir) = &args.man {
        write_man_pages(dir)?;
    }
    if let Some(shell) = args.completion {
        let mut cmd = public(command());
        clap_complete::generate(shell, &mut cmd, "lynxfs", &mut std::io::stdout());
    }
    if args.man.is_none() && args.completion.is_none() {
        anyhow::bail!("nothing to generate: give --man DIR and/or --completion SHELL");
    }
    Ok(())
}

/// `cmd` without its hidden subcommands, which some shells' completions would offer.
fn public(cmd: Command) -> Command {
    let visible: Vec<Command> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .collect();
    let mut public = Command::new("lynxfs")
        .version(env!("CARGO_PKG_VERSION"))
        .subcommands(visible);
    if let Some(a) = cmd.get_about() {
        public = public.about(a.clone());
    }
    public
}

/// lynxfs.8, one page per visible subcommand, and mount.lynxfs.8; returns their paths.
pub fn write_man_pages(dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("{}", dir.display()))?;
    let mut top = command().disable_help_subcommand(true);
    top.build();
    let mut pages = vec![(top.clone(), Vec::new())];
    for sub in top.get_subcommands().filter(|s| !s.is_hide_set()) {
        let extra = if sub.get_name() == "mount" {
            vec![mount_options_section()]
        } else {
            Vec::new()
        };
        pages.push((sub.clone(), extra));
    }
    pages.push((
        mount_helper(),
        vec![mount_options_section(), fstab_section()],
    ));
    let mut written = Vec::new();
    for (cmd, extra) in pages {
        let shape = Shape {
            subcommands: cmd.has_subcommands(),
            version: cmd.get_version().is_some(),
        };
        let man = Man::new(cmd).section(SECTION);
        let path = dir.join(man.get_filename());
        let mut f = std::fs::File::create(&path).with_context(|| format!("{}", path.display()))?;
        render(&man, shape, &extra, &mut f).with_context(|| format!("{}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// The page as clap_mangen renders it, with `extra` sections in place of its EXTRA
/// section (the plain-text copy of the same list that `--help` shows).
/// What clap_mangen's sections need that it does not check itself.
#[derive(Clone, Copy)]
struct Shape {
    subcommands: bool,
    version: bool,
}

fn render(man: &Man, shape: Shape, extra: &[Roff], w: &mut dyn Write) -> std::io::Result<()> {
    man.render_title(w)?;
    man.render_name_section(w)?;
    man.render_synopsis_section(w)?;
    man.render_description_section(w)?;
    man.render_options_section(w)?;
    if shape.subcommands {
        man.render_subcommands_section(w)?;
    }
    for r in extra {
        r.to_writer(w)?;
    }
    let mut see_also = Roff::new();
    see_also.control("SH", ["SEE ALSO"]);
    see_also.text([roman(
        "lynxfs(8), mount.lynxfs(8), mount(8), fstab(5), fusermount3(1); \
         README.md and docs/ in the LynxFS sources",
    )]);
    see_also.to_writer(w)?;
    if shape.version {
        man.render_version_section(w)?;
    }
    Ok(())
}

/// Every `-o` option, from the table `MountOptions::apply` parses through.
fn mount_options_section() -> Roff {
    let mut r = Roff::new();
    r.control("SH", ["MOUNT OPTIONS"]);
    r.text([roman(
        "Given with -o, comma-separated; -o may be given more than once.",
    )]);
    for o in OPTIONS {
        r.control("TP", []);
        match o.value {
            Some(v) => r.text([bold(format!("{}=", o.name)), italic(v)]),
            None => r.text([bold(o.name)]),
        };
        r.text([roman(o.help)]);
    }
    r.control("TP", []);
    r.text([bold("x-"), italic("NAME"), bold("="), italic("VALUE")]);
    r.text([roman(X_OPTIONS_HELP)]);
    r
}

fn fstab_section() -> Roff {
    let mut r = Roff::new();
    r.control("SH", ["FSTAB"]);
    r.text([roman(
        "A line of /etc/fstab mounts a pool with mount -a and at boot (systemd's fstab \
         generator):",
    )]);
    r.control("EX", []);
    r.text([roman(
        "/dev/pmem0  /mnt/pm  lynxfs  defaults,allow_other,nofail  0  0",
    )]);
    r.control("EE", []);
    r.text([roman(
        "The pool must exist (lynxfs mkfs); a pool in /dev/shm is gone after a reboot. \
         A live mount is listed as type fuse.lynxfs, for which mount(8) runs \
         mount.fuse.lynxfs (the same program): mount -o remount,ro DIR works with it.",
    )]);
    r
}

/// `mount.lynxfs` as mount(8) calls it (parsed by hand in `mount::helper`: this
/// definition only documents it).
fn mount_helper() -> Command {
    Command::new("mount.lynxfs")
        .version(env!("CARGO_PKG_VERSION"))
        .about("mount a LynxFS pool (the helper mount(8) runs for type lynxfs)")
        .long_about(
            "mount(8) runs this helper for `mount -t lynxfs POOL DIR` and for an fstab line \
             of type lynxfs, and, as mount.fuse.lynxfs, for a live mount of type \
             fuse.lynxfs (`mount -o remount,ro DIR`). It mounts as `lynxfs mount` does: it \
             returns once the mount is ready, and its daemon serves from the background; \
             `umount DIR` (or `lynxfs umount DIR`) unmounts. Exit status 32 on failure, as \
             mount(8) expects. With remount, only ro, rw, suid, nosuid, dev, nodev, exec, \
             noexec, nodiratime and lazytime can change on a live mount.",
        )
        .disable_help_flag(true)
        .disable_version_flag(true)
        .arg(
            Arg::new("pool")
                .value_name("POOL")
                .required(true)
                .help("The pool file or device."),
        )
        .arg(
            Arg::new("dir")
                .value_name("DIR")
                .required(true)
                .help("The mount point."),
        )
        .arg(
            Arg::new("options")
                .short('o')
                .value_name("OPTIONS")
                .action(ArgAction::Append)
                .help("Mount options, comma-separated (see MOUNT OPTIONS)."),
        )
        .arg(
            Arg::new("fake")
                .short('f')
                .action(ArgAction::SetTrue)
                .help("Fake: check the arguments, mount nothing."),
        )
        .arg(
            Arg::new("sloppy")
                .short('s')
                .action(ArgAction::SetTrue)
                .help("Accepted from mount(8) and ignored."),
        )
        .arg(
            Arg::new("nomtab")
                .short('n')
                .action(ArgAction::SetTrue)
                .help("Accepted from mount(8) and ignored (there is no mtab to write)."),
        )
        .arg(
            Arg::new("verbose")
                .short('v')
                .action(ArgAction::SetTrue)
                .help("Accepted from mount(8) and ignored."),
        )
        .arg(
            Arg::new("type")
                .short('t')
                .value_name("TYPE")
                .help("The type mount(8) was given (lynxfs or fuse.lynxfs); ignored."),
        )
        .arg(
            Arg::new("namespace")
                .short('N')
                .value_name("NS")
                .help("Accepted from mount(8) and ignored."),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mount_option_is_in_both_manual_pages() {
        let dir = tempfile::tempdir().unwrap();
        let pages = write_man_pages(dir.path()).unwrap();
        let names: Vec<_> = pages
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        for want in [
            "lynxfs.8",
            "lynxfs-mount.8",
            "lynxfs-mkfs.8",
            "mount.lynxfs.8",
        ] {
            assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
        }
        assert!(!names.iter().any(|n| n.contains("generate")), "{names:?}");
        for page in ["lynxfs-mount.8", "mount.lynxfs.8"] {
            let text = std::fs::read_to_string(dir.path().join(page)).unwrap();
            for o in OPTIONS {
                assert!(
                    text.contains(&format!("\\fB{}", o.name.replace('-', "\\-"))),
                    "{page} lacks {}",
                    o.name
                );
            }
        }
    }

    #[test]
    fn mount_help_lists_every_option() {
        let help = command()
            .find_subcommand_mut("mount")
            .unwrap()
            .render_long_help()
            .to_string();
        for o in OPTIONS {
            assert!(help.contains(&o.synopsis()), "--help lacks {}", o.name);
        }
    }
}
