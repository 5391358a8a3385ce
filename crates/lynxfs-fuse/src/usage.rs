//! Live figures of a mounted pool, read through the mount: the root directory answers
//! `getxattr("lynxfs.usage")` with the engine's [`Usage`] and the daemon's resident
//! memory, as `key value` lines. The name has no Linux namespace prefix, so it can
//! never name a stored attribute (the engine refuses such names), and it is not listed
//! by `listxattr`. `lynxfs info` reads it.

use lynxfs::meta::Usage;

/// The attribute the mount's root answers.
pub const USAGE_XATTR: &str = "lynxfs.usage";

/// How the kernel's FUSE requests reach the daemon.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// The classic `/dev/fuse` read/write loop.
    DevFuse,
    /// FUSE over io_uring: one queue per CPU (the `/dev/fuse` loop still carries
    /// FORGET and INTERRUPT).
    IoUring,
}

impl Transport {
    /// The name `lynxfs info` prints and the usage attribute carries.
    pub fn name(self) -> &'static str {
        match self {
            Transport::DevFuse => "/dev/fuse",
            Transport::IoUring => "io_uring",
        }
    }

    fn from_name(name: &str) -> Option<Transport> {
        [Transport::DevFuse, Transport::IoUring]
            .into_iter()
            .find(|t| t.name() == name)
    }
}

/// What the daemon reports: the namespace's usage, the daemon's own memory and the
/// transport it serves.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LiveUsage {
    pub usage: Usage,
    /// The daemon's resident anonymous memory (`RssAnon`), bytes.
    pub rss_anon: u64,
    /// The FUSE transport the daemon serves; `None` from a daemon that does not say.
    pub transport: Option<Transport>,
}

/// The line naming the transport (after the numeric fields).
const TRANSPORT: &str = "transport";

/// The fields in order, with how to reach each in a [`LiveUsage`].
#[allow(clippy::type_complexity)]
const FIELDS: &[(&str, fn(&mut LiveUsage) -> &mut u64)] = &[
    ("blocks_total", |u| &mut u.usage.blocks_total),
    ("blocks_free", |u| &mut u.usage.blocks_free),
    ("inodes_total", |u| &mut u.usage.inodes_total),
    ("inodes_free", |u| &mut u.usage.inodes_free),
    ("dentries_total", |u| &mut u.usage.dentries_total),
    ("dentries_free", |u| &mut u.usage.dentries_free),
    ("indexed_dirs", |u| &mut u.usage.indexed_dirs),
    ("index_entries", |u| &mut u.usage.index_entries),
    ("index_bytes", |u| &mut u.usage.index_bytes),
    ("cachelets", |u| &mut u.usage.cachelets),
    ("cachelet_bytes", |u| &mut u.usage.cachelet_bytes),
    ("rss_anon", |u| &mut u.rss_anon),
];

impl LiveUsage {
    /// The calling process's figures (the daemon answering the attribute).
    pub fn of<B: lynxfs::pmem::Backend>(
        fs: &lynxfs::Fs<B>,
        transport: Option<Transport>,
    ) -> LiveUsage {
        LiveUsage {
            usage: fs.usage(),
            rss_anon: rss_anon().unwrap_or(0),
            transport,
        }
    }

    pub fn encode(&self) -> String {
        let mut me = self.clone();
        let mut text: String = FIELDS
            .iter()
            .map(|(k, f)| format!("{k} {}\n", f(&mut me)))
            .collect();
        if let Some(t) = self.transport {
            text += &format!("{TRANSPORT} {}\n", t.name());
        }
        text
    }

    /// Parses [`LiveUsage::encode`]'s text: every numeric field this version knows must
    /// be there (the transport may be missing); fields it does not know (from a newer
    /// daemon) are skipped.
    pub fn decode(text: &str) -> Option<LiveUsage> {
        let mut out = LiveUsage::default();
        let mut seen = 0;
        for line in text.lines() {
            let (k, v) = line.split_once(' ')?;
            if k == TRANSPORT {
                out.transport = Some(Transport::from_name(v)?);
            } else if let Some((_, f)) = FIELDS.iter().find(|(name, _)| *name == k) {
                *f(&mut out) = v.parse().ok()?;
                seen += 1;
            }
        }
        (seen == FIELDS.len()).then_some(out)
    }
}

/// This process's resident anonymous memory, from /proc/self/status.
fn rss_anon() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb = status.lines().find_map(|l| l.strip_prefix("RssAnon:"))?;
    let kb: u64 = kb.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_round_trip() {
        let mut u = LiveUsage::default();
        for (i, (_, f)) in FIELDS.iter().enumerate() {
            *f(&mut u) = 1000 + i as u64;
        }
        let text = u.encode();
        assert_eq!(LiveUsage::decode(&text), Some(u.clone()));
        assert!(text.contains("index_bytes 1008\n"));
        for t in [Transport::DevFuse, Transport::IoUring] {
            u.transport = Some(t);
            let text = u.encode();
            assert!(text.contains(&format!("transport {}\n", t.name())));
            assert_eq!(LiveUsage::decode(&text), Some(u.clone()));
        }
    }

    #[test]
    fn decode_refuses_partial_or_foreign_text() {
        let text = LiveUsage::default().encode();
        let partial: String = text.lines().skip(1).map(|l| format!("{l}\n")).collect();
        assert_eq!(LiveUsage::decode(&partial), None);
        assert_eq!(LiveUsage::decode("hello world\n"), None);
        let newer = format!("{text}some_future_field 7\n");
        assert_eq!(
            LiveUsage::decode(&format!("{text}transport carrier-pigeon\n")),
            None
        );
        assert_eq!(LiveUsage::decode(&newer), Some(LiveUsage::default()));
        assert_eq!(LiveUsage::decode("blocks_total x\n"), None);
    }

    #[test]
    fn this_process_has_resident_memory() {
        assert!(rss_anon().unwrap() > 0);
    }
}
