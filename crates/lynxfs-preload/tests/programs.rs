//! Real, unmodified programs under `lynxfs run` (coreutils, tar with gzip, git,
//! sqlite3, make with gcc, Python), each run twice with the same shell script: once
//! preloaded in a directory D served by a fresh pool, once plainly in a tmpfs directory
//! T. The pool's tree, read back through the engine (so the check does not trust the
//! preload), must equal T's: names, types, modes, owners, sizes, contents, symlink
//! targets, hard-link groups (mtimes only where the script sets them). Then a program
//! killed with SIGKILL mid-run must not hurt another attached one, nor the pool.
//!
//! `cargo test` does not build cdylibs nor other packages' binaries: the test builds
//! liblynxfs_preload.so and lynxfs once, with its own profile, into its own target
//! directory. Every process group runs under a time limit that kills it and fails the
//! test; the tools come from /usr/bin, and a missing one fails the test saying so.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use lynxfs::pmem::PmemBackend;
use lynxfs::{Cred, Fs, MkfsOptions, Pool};

use lynxfs_test_support::built::preload as built;
use lynxfs_test_support::child::{kill_group, spawn_group};
use lynxfs_test_support::{child, watchdog};

/// How long one program (a whole script) may run.
const LIMIT: Duration = Duration::from_secs(120);
/// How long a whole test may run.
const TEST_LIMIT: Duration = Duration::from_secs(400);

// ---- building what the tests run ----

/// Fails the test when a tool the workload needs is not installed.
fn need(tool: &str, package: &str) {
    let p = Path::new("/usr/bin").join(tool);
    assert!(
        p.exists(),
        "{} is missing: install it (apt-get install {package})",
        p.display()
    );
}

// ---- running processes within a limit ----

fn run_bounded(mut cmd: Command, what: &str) -> Output {
    child::run_bounded(&mut cmd, what, LIMIT)
}

fn finish_within(child: Child, what: &str) -> Output {
    child::finish_within(child, what, LIMIT)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

// ---- the trees ----

/// What is compared of one file.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Node {
    /// The S_IFMT bits.
    kind: u32,
    /// Permission bits (with set-id and sticky).
    perm: u32,
    uid: u32,
    gid: u32,
    /// Regular files and symlinks (a directory's size is the file system's own).
    size: Option<u64>,
    /// A regular file's contents, hashed.
    hash: Option<u64>,
    /// A symlink's target.
    target: Option<Vec<u8>>,
    /// The first path (in order) of the hard links to the same non-directory inode,
    /// when it has more than one.
    link_group: Option<Vec<u8>>,
    /// Nanoseconds; only for the paths a workload sets times on.
    mtime: Option<u64>,
}

/// A tree: relative path -> what it is.
type Tree = BTreeMap<Vec<u8>, Node>;

/// A node and the inode number it came from (for the hard-link groups).
struct Found {
    node: Node,
    ino: u64,
    nlink: u64,
}

fn hash(data: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    data.hash(&mut h);
    h.finish()
}

fn new_node(kind: u32, perm: u32, uid: u32, gid: u32) -> Node {
    Node {
        kind,
        perm,
        uid,
        gid,
        size: None,
        hash: None,
        target: None,
        link_group: None,
        mtime: None,
    }
}

/// Sets each multiply-linked non-directory's link group, and the mtimes asked for.
fn finish_tree(found: BTreeMap<Vec<u8>, (Found, u64)>, keep_mtime: &[&str]) -> Tree {
    let mut first: HashMap<u64, Vec<u8>> = HashMap::new();
    for (path, (f, _)) in &found {
        if f.node.kind != libc::S_IFDIR && f.nlink > 1 {
            first.entry(f.ino).or_insert_with(|| path.clone());
        }
    }
    found
        .into_iter()
        .map(|(path, (f, mtime))| {
            let mut node = f.node;
            node.link_group = first.get(&f.ino).cloned();
            if keep_mtime.iter().any(|k| k.as_bytes() == path.as_slice()) {
                node.mtime = Some(mtime);
            }
            (path, node)
        })
        .collect()
}

/// `root` walked with std::fs (the kernel's view), paths relative to it.
fn disk_tree(root: &Path, keep_mtime: &[&str]) -> Tree {
    use std::os::unix::ffi::OsStrExt;
    let mut found = BTreeMap::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        for e in std::fs::read_dir(root.join(&rel)).expect("read_dir") {
            let e = e.expect("dir entry");
            let rel = rel.join(e.file_name());
            let p = root.join(&rel);
            let m = std::fs::symlink_metadata(&p).expect("lstat");
            let kind = m.mode() & libc::S_IFMT;
            let mut node = new_node(kind, m.mode() & 0o7777, m.uid(), m.gid());
            match kind {
                libc::S_IFDIR => todo.push(rel.clone()),
                libc::S_IFREG => {
                    node.size = Some(m.size());
                    node.hash = Some(hash(&std::fs::read(&p).expect("read")));
                }
                libc::S_IFLNK => {
                    node.size = Some(m.size());
                    let t = std::fs::read_link(&p).expect("readlink");
                    node.target = Some(t.as_os_str().as_bytes().to_vec());
                }
                _ => {}
            }
            let mtime = m.mtime() as u64 * 1_000_000_000 + m.mtime_nsec() as u64;
            let f = Found {
                node,
                ino: m.ino(),
                nlink: m.nlink(),
            };
            found.insert(rel.as_os_str().as_bytes().to_vec(), (f, mtime));
        }
    }
    finish_tree(found, keep_mtime)
}

/// The pool's tree read through the engine (attached like any process).
fn pool_tree(pool: &Path, keep_mtime: &[&str]) -> Tree {
    let fs = Fs::open(pool).unwrap_or_else(|e| panic!("attach {}: {e}", pool.display()));
    let s = fs.session(Cred::root());
    let mut found = BTreeMap::new();
    let mut todo: Vec<Vec<u8>> = vec![Vec::new()];
    while let Some(rel) = todo.pop() {
        let dir = [b"/".as_slice(), &rel].concat();
        for e in s.readdir(&dir).expect("pool readdir") {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            let rel = if rel.is_empty() {
                e.name.clone()
            } else {
                [rel.as_slice(), b"/", &e.name].concat()
            };
            let p = [b"/".as_slice(), &rel].concat();
            let st = s.lstat(&p).expect("pool lstat");
            let kind = st.mode & libc::S_IFMT;
            let mut node = new_node(kind, st.mode & 0o7777, st.uid, st.gid);
            match kind {
                libc::S_IFDIR => todo.push(rel.clone()),
                libc::S_IFREG => {
                    node.size = Some(st.size);
                    node.hash = Some(hash(&read_pool_file(&fs, &s, &p, st.size)));
                }
                libc::S_IFLNK => {
                    node.size = Some(st.size);
                    node.target = Some(s.readlink(&p).expect("pool readlink"));
                }
                _ => {}
            }
            let f = Found {
                node,
                ino: st.ino,
                nlink: st.nlink,
            };
            // Nanoseconds, as disk_tree counts them (the script's times are after 1970).
            let mtime = st.mtime.as_ns().expect("an mtime after 1970");
            found.insert(rel, (f, mtime));
        }
    }
    drop(s);
    fs.close().expect("detach");
    finish_tree(found, keep_mtime)
}

fn read_pool_file(fs: &Fs, s: &lynxfs::Session<PmemBackend>, p: &[u8], size: u64) -> Vec<u8> {
    let fd = s.open(p, libc::O_RDONLY, 0).expect("pool open");
    let mut buf = vec![0u8; size as usize];
    let mut off = 0;
    while off < buf.len() {
        let n = fs
            .pread(fd, &mut buf[off..], off as u64)
            .expect("pool pread");
        assert!(n > 0, "{}: short file", text(p));
        off += n;
    }
    fs.close_fd(fd).expect("pool close");
    buf
}

/// Drops `prefix` and everything under it (what differs by nature between two runs,
/// e.g. an archive holding the mtimes of the moment).
fn without(mut tree: Tree, prefix: &str) -> Tree {
    let p = prefix.as_bytes();
    tree.retain(|k, _| !(k == p || (k.starts_with(p) && k.get(p.len()) == Some(&b'/'))));
    tree
}

/// The differences between two trees, one line each (empty: equal).
fn differences(got: &Tree, want: &Tree) -> Vec<String> {
    let mut d = Vec::new();
    for (k, w) in want {
        match got.get(k) {
            None => d.push(format!("missing: {}", text(k))),
            Some(g) if g != w => d.push(format!("{}: got {g:?}, want {w:?}", text(k))),
            Some(_) => {}
        }
    }
    for k in got.keys().filter(|k| !want.contains_key(*k)) {
        d.push(format!("unexpected: {}", text(k)));
    }
    d
}

fn assert_same(got: &Tree, want: &Tree, what: &str) {
    let d = differences(got, want);
    assert!(
        d.is_empty(),
        "{what}: the pool's tree differs from tmpfs's:\n{}",
        d.join("\n")
    );
    assert!(!want.is_empty(), "{what}: the workload made nothing");
}

// ---- one workload, twice ----

/// A fresh pool (in /dev/shm), the directory it answers for (D), the tmpfs directory
/// of the plain run (T) and a HOME for programs that want one.
struct Bench {
    pool: PathBuf,
    d: tempfile::TempDir,
    t: tempfile::TempDir,
    home: tempfile::TempDir,
}

impl Bench {
    fn new(test: &str) -> Bench {
        Bench::sized(test, 256 << 20)
    }

    fn sized(test: &str, size: u64) -> Bench {
        let pool = PathBuf::from(format!(
            "/dev/shm/lynxfs-programs-{}-{test}.pool",
            std::process::id()
        ));
        let mut o = MkfsOptions::new(size);
        o.lanes = 2;
        o.force = true;
        Pool::mkfs(&pool, &o, PmemBackend::default()).expect("mkfs");
        Bench {
            pool,
            d: tempfile::tempdir().expect("D"),
            t: tempfile::tempdir_in("/dev/shm").expect("T"),
            home: tempfile::tempdir().expect("HOME"),
        }
    }

    /// The environment both runs get (`env` on top of what the test has).
    fn shell(&self, script: &str, cwd: &Path, env: &[(&str, &str)]) -> Command {
        let mut c = Command::new("/bin/sh");
        c.arg("-c")
            .arg(script)
            .current_dir(cwd)
            .env("HOME", self.home.path())
            .env("LC_ALL", "C")
            .env("TZ", "UTC");
        c.envs(env.iter().copied());
        c
    }

    /// `lynxfs run --pool P --at D -- sh -c SCRIPT` in D.
    fn preloaded(&self, script: &str, env: &[(&str, &str)]) -> Command {
        self.preloaded_at(script, self.d.path(), self.d.path(), env)
    }

    /// `lynxfs run --pool P --at AT -- sh -c SCRIPT` in CWD.
    fn preloaded_at(&self, script: &str, at: &Path, cwd: &Path, env: &[(&str, &str)]) -> Command {
        let sh = self.shell(script, cwd, env);
        let mut c = Command::new(&built().lynxfs);
        c.arg("run")
            .arg("--pool")
            .arg(&self.pool)
            .arg("--at")
            .arg(at)
            .arg("--")
            .arg(sh.get_program())
            .args(sh.get_args())
            .current_dir(cwd)
            .env("LYNXFS_PRELOAD_LIB", &built().preload)
            .envs(sh.get_envs().filter_map(|(k, v)| Some((k, v?))));
        c
    }

    /// Runs `script` preloaded in D and plainly in T; both must succeed with the same
    /// output. Returns (pool's tree, T's tree).
    fn compare(&self, script: &str, env: &[(&str, &str)], keep_mtime: &[&str]) -> (Tree, Tree) {
        let on_pool = run_bounded(self.preloaded(script, env), "preloaded run");
        let on_tmpfs = run_bounded(self.shell(script, self.t.path(), env), "tmpfs run");
        assert!(
            on_tmpfs.status.success(),
            "the script fails on tmpfs ({}): {}",
            on_tmpfs.status,
            text(&on_tmpfs.stderr)
        );
        assert!(
            on_pool.status.success(),
            "the script fails under lynxfs run ({}): {}\n(on tmpfs it printed: {})",
            on_pool.status,
            text(&on_pool.stderr),
            text(&on_tmpfs.stderr)
        );
        assert_eq!(
            text(&on_pool.stdout),
            text(&on_tmpfs.stdout),
            "stdout differs"
        );
        let untouched = std::fs::read_dir(self.d.path()).unwrap().count();
        assert_eq!(
            untouched, 0,
            "the preloaded run wrote to D's own file system"
        );
        (
            pool_tree(&self.pool, keep_mtime),
            disk_tree(self.t.path(), keep_mtime),
        )
    }

    /// A clean `lynxfs fsck` of the pool (no process attached).
    fn fsck_clean(&self) {
        let mut c = Command::new(&built().lynxfs);
        c.arg("fsck").arg(&self.pool);
        let o = run_bounded(c, "fsck");
        assert!(
            o.status.success(),
            "fsck ({}): {}{}",
            o.status,
            text(&o.stdout),
            text(&o.stderr)
        );
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.pool);
    }
}

/// The file `name` of a tree, which must be a regular file of `want`'s contents.
fn assert_file(tree: &Tree, name: &str, want: &[u8]) {
    let n = tree
        .get(name.as_bytes())
        .unwrap_or_else(|| panic!("{name} is missing"));
    assert_eq!(n.hash, Some(hash(want)), "{name}: contents");
}

// ---- the workloads ----

const COREUTILS: &str = r#"
set -e
mkdir -p src/a/b/c src/e src/flat
printf 'hello\n' > src/a/one.txt
seq 1 20000 > src/a/b/c/big
seq 1 500 > src/a/b/numbers
for i in 1 2 3 4 5 6 7 8; do seq 1 "$i"00 > src/flat/f$i; done
ln src/a/one.txt src/a/hard
ln -s ../a/one.txt src/e/sym
ln -s f1 src/flat/sym
chmod 640 src/a/b/numbers
chmod 750 src/e
chmod 4755 src/flat/f8
touch -d '2001-02-03 04:05:06' src/a/one.txt
cp -a src copy
mv copy/a/b copy/moved
mv copy/flat/f1 copy/flat/renamed
rm -r copy/e
rm copy/flat/f2
# Not the "total" line: file systems count a short symlink's blocks differently.
ls -l --time-style=+ src/flat | tail -n +2 > ls.out
cat src/a/one.txt src/a/b/numbers > cat.out
find . ! -name '*.out' \( -type f -o -type l \) -printf '%y %m %s %n %p %l\n' | sort > find.out
du -s . > /dev/null
du -b src/a/one.txt src/a/b/c/big > du.out
cat ls.out du.out
"#;

#[test]
fn coreutils() {
    let _w = watchdog("coreutils", TEST_LIMIT);
    let b = Bench::new("coreutils");
    let keep = [
        "src/a/one.txt",
        "src/a/hard",
        "copy/a/one.txt",
        "copy/a/hard",
    ];
    let (pool, tmpfs) = b.compare(COREUTILS, &[], &keep);
    assert_same(&pool, &tmpfs, "coreutils");
    assert_eq!(
        tmpfs[b"src/a/one.txt".as_slice()].mtime,
        Some(981_173_106_000_000_000),
        "touch -d"
    );
    assert_file(
        &tmpfs,
        "du.out",
        b"6\tsrc/a/one.txt\n108894\tsrc/a/b/c/big\n",
    );
    b.fsck_clean();
}

/// `LYNXFS_POPULATE` (the runtime state mapped in at attach, for long-lived programs)
/// changes nothing a program sees.
#[test]
fn populating_at_attach_changes_nothing_programs_see() {
    let _w = watchdog("populating_at_attach", TEST_LIMIT);
    let b = Bench::new("populate");
    let keep = ["src/a/one.txt"];
    let (pool, tmpfs) = b.compare(COREUTILS, &[("LYNXFS_POPULATE", "1")], &keep);
    assert_same(&pool, &tmpfs, "coreutils with LYNXFS_POPULATE=1");
    b.fsck_clean();
}

const TAR: &str = r#"
set -e
mkdir -p tree/x/y tree/z
for i in $(seq 1 60); do seq 1 $((i * 37)) > tree/x/f$i; done
for i in $(seq 1 20); do echo "$i" > tree/x/y/g$i; done
ln -s f1 tree/x/link
ln tree/x/f2 tree/x/hard
chmod 600 tree/x/f3
chmod 700 tree/z
tar -czf t.tgz tree
mkdir out
tar -xzf t.tgz -C out
tar -tzf t.tgz | sort > list.out
gzip -t t.tgz
rm -r tree
"#;

#[test]
fn tar_with_gzip() {
    let _w = watchdog("tar_with_gzip", TEST_LIMIT);
    need("tar", "tar");
    need("gzip", "gzip");
    let b = Bench::new("tar");
    let (pool, tmpfs) = b.compare(TAR, &[], &[]);
    // The archive holds the moment's mtimes: present on both sides, not compared.
    for t in [&pool, &tmpfs] {
        assert_eq!(t[b"t.tgz".as_slice()].kind, libc::S_IFREG);
    }
    assert_same(&without(pool, "t.tgz"), &without(tmpfs, "t.tgz"), "tar");
    b.fsck_clean();
}

const GIT: &str = r#"
set -e
git init -q -b main repo
cd repo
git config user.name Lynx
git config user.email lynx@example.invalid
mkdir -p src doc
for i in $(seq 1 30); do seq 1 "$i" > src/file$i.txt; done
printf '# readme\n' > doc/README
chmod 755 src/file1.txt
ln -s ../doc/README src/readme-link
git add .
git commit -q -m first
git status --porcelain > ../status1.out
git checkout -q -b other
echo changed >> src/file2.txt
rm src/file3.txt
echo new > src/new.txt
git add -A
git commit -q -m second
git checkout -q main
git log --format=%s --all > ../log.out
git rev-parse main other > ../revs.out
git status --porcelain > ../status2.out
git diff --stat main other > ../diff.out
cat ../log.out ../revs.out
"#;

#[test]
fn git() {
    let _w = watchdog("git", TEST_LIMIT);
    need("git", "git");
    let b = Bench::new("git");
    let env = [
        ("GIT_CONFIG_NOSYSTEM", "1"),
        ("GIT_AUTHOR_DATE", "2020-01-02T03:04:05Z"),
        ("GIT_COMMITTER_DATE", "2020-01-02T03:04:05Z"),
    ];
    let (pool, tmpfs) = b.compare(GIT, &env, &[]);
    // .git/index records inode numbers and times: the working trees, the logs and the
    // commit ids (which hash every object) are what must agree.
    assert_same(
        &without(pool, "repo/.git"),
        &without(tmpfs, "repo/.git"),
        "git",
    );
    b.fsck_clean();
}

const SQLITE: &str = r#"
set -e
{
  echo "CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, n INTEGER);"
  echo "CREATE INDEX t_n ON t(n);"
  for tx in $(seq 0 9); do
    echo "BEGIN;"
    for i in $(seq $((tx * 100 + 1)) $((tx * 100 + 100))); do
      echo "INSERT INTO t VALUES($i, 'row-$i', $((i * 7 % 1000)));"
    done
    echo "COMMIT;"
  done
  echo "BEGIN; UPDATE t SET name = name || '-updated' WHERE id % 3 = 0; COMMIT;"
  echo "BEGIN; DELETE FROM t WHERE id % 5 = 0; COMMIT;"
  echo "BEGIN; INSERT INTO t VALUES(5000, 'rolled back', 0); ROLLBACK;"
} > script.sql
sqlite3 db.sqlite < script.sql
sqlite3 db.sqlite 'PRAGMA integrity_check;' > integrity.out
sqlite3 db.sqlite 'SELECT id, name, n FROM t ORDER BY id;' > dump.out
sqlite3 db.sqlite 'SELECT count(*), sum(n) FROM t;'
"#;

#[test]
fn sqlite3() {
    let _w = watchdog("sqlite3", TEST_LIMIT);
    need("sqlite3", "sqlite3");
    let b = Bench::new("sqlite3");
    let (pool, tmpfs) = b.compare(SQLITE, &[], &[]);
    assert_file(&pool, "integrity.out", b"ok\n");
    assert_same(&pool, &tmpfs, "sqlite3");
    b.fsck_clean();
}

const MAKE: &str = r#"
set -e
mkdir proj
cd proj
cat > calc.h <<'EOF'
int add(int a, int b);
int mul(int a, int b);
EOF
cat > add.c <<'EOF'
#include "calc.h"
int add(int a, int b) { return a + b; }
EOF
cat > mul.c <<'EOF'
#include "calc.h"
int mul(int a, int b) { int r = 0; for (int i = 0; i < b; i++) r = add(r, a); return r; }
EOF
cat > main.c <<'EOF'
#include <stdio.h>
#include "calc.h"
int main(void) { printf("%d %d\n", add(2, 3), mul(6, 7)); return 0; }
EOF
printf 'CC = gcc\nCFLAGS = -O1\nprog: main.o add.o mul.o\n\t$(CC) -o prog main.o add.o mul.o\n%%.o: %%.c calc.h\n\t$(CC) $(CFLAGS) -c $< -o $@\nclean:\n\trm -f prog *.o\n' > Makefile
make
./prog > ../run.out
make
make clean
make prog
cat ../run.out
"#;

#[test]
fn make_and_gcc() {
    let _w = watchdog("make_and_gcc", TEST_LIMIT);
    need("make", "make");
    need("gcc", "gcc");
    let b = Bench::new("make");
    let (pool, tmpfs) = b.compare(MAKE, &[], &[]);
    assert_file(&tmpfs, "run.out", b"5 42\n");
    assert_same(&pool, &tmpfs, "make");
    b.fsck_clean();
}

const PYTHON: &str = r#"
set -e
cat > work.py <<'EOF'
import os, shutil
os.makedirs("py/a/b", exist_ok=True)
for i in range(100):
    with open(f"py/a/f{i}", "w") as f:
        f.write(str(i) * i)
os.rename("py/a/f0", "py/a/zero")
with open("py/a/b/bin", "wb") as f:
    f.write(bytes(range(256)) * 64)
    f.seek(100)
    f.write(b"patched")
shutil.copytree("py/a", "py/copy")
shutil.move("py/copy/f1", "py/b1")
shutil.rmtree("py/a/b")
os.symlink("copy/f2", "py/link")
os.chmod("py/copy/f3", 0o600)
os.utime("py/copy/f4", (1_000_000_000, 1_000_000_000))
with open("py/log", "a") as f:
    f.write("one\n")
with open("py/log", "a") as f:
    f.write("two\n")
os.replace("py/log", "py/log.done")
files = [os.path.join("py/copy", n) for n in sorted(os.listdir("py/copy"))]
total = sum(os.path.getsize(f) for f in files if os.path.isfile(f))
with open("py/copy/b/bin", "rb") as f:
    f.seek(100)
    print(total, f.read(7).decode(), os.readlink("py/link"), len(os.listdir("py/a")))
EOF
/usr/bin/python3 work.py
"#;

#[test]
fn python() {
    let _w = watchdog("python", TEST_LIMIT);
    need("python3", "python3");
    let b = Bench::new("python");
    let (pool, tmpfs) = b.compare(PYTHON, &[], &["py/copy/f4"]);
    assert_eq!(
        tmpfs[b"py/copy/f4".as_slice()].mtime,
        Some(1_000_000_000_000_000_000),
        "os.utime"
    );
    assert_same(&pool, &tmpfs, "python");
    b.fsck_clean();
}

// ---- a full pool ----

/// Fills the pool, then frees the space and goes on. The error message goes outside
/// the pool (in the full pool it may find no room either).
const FILL: &str = r#"
err=$(mktemp /tmp/lynxfs-fill-XXXXXX)
if head -c 64M /dev/zero > big 2> "$err"; then echo wrote; else echo failed; fi
grep -c 'No space left on device' "$err"
rm big "$err"
echo after > small
cat small
"#;

#[test]
fn a_full_pool_fails_the_write_with_enospc_and_recovers() {
    let b = Bench::sized("full", 16 << 20);
    let out = run_bounded(b.preloaded(FILL, &[]), "fill");
    assert!(
        out.status.success(),
        "fill ({}): {}",
        out.status,
        text(&out.stderr)
    );
    assert_eq!(text(&out.stdout), "failed\n1\nafter\n");
    let tree = pool_tree(&b.pool, &[]);
    assert_eq!(tree.keys().collect::<Vec<_>>(), [b"small"]);
    assert_file(&tree, "small", b"after\n");
    b.fsck_clean();
}

// ---- paths entering the pool's directory from outside ----

/// Run in the directory above the pool's directory `p` (no mount there): every path
/// below reaches `p` from outside it, by name, and must land in the pool, never in the
/// host directory under it.
const ENTERING: &str = r#"
set -e
echo hi > p/a
cp p/a p/b
mkdir p/d
cd p/d
echo in > x
pwd > ../pwd.out
cd ../..
mkdir -p q/sub
cd q/sub
echo up > ../../p/c
cd ../..
ln -s . here
echo link > here/p/e
echo abs > "$PWD/q/../p/g"
git init -q p/repo
printf 'one\n' > q/sub/f
rsync -a q/ p/r/
python3 -c '
import os
fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
os.close(os.open("p/h", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
os.mkdir("p/i", dir_fd=fd)
print(sorted(os.listdir("p/i/..")))
'
cat p/a p/d/x p/r/sub/f
"#;

#[test]
fn paths_that_enter_the_pools_directory_from_outside_reach_the_pool() {
    let _w = watchdog(
        "paths_that_enter_the_pools_directory_from_outside_reach_the_pool",
        TEST_LIMIT,
    );
    need("git", "git");
    need("rsync", "rsync");
    need("python3", "python3");
    let b = Bench::new("entering");
    let outer = tempfile::tempdir().expect("outer");
    let outer = outer.path().canonicalize().expect("canonical");
    let at = outer.join("p");
    std::fs::create_dir(&at).expect("mkdir p");
    let out = run_bounded(b.preloaded_at(ENTERING, &at, &outer, &[]), "entering");
    assert!(
        out.status.success(),
        "the script fails ({}): {}",
        out.status,
        text(&out.stderr)
    );
    let host: Vec<_> = std::fs::read_dir(&at).expect("read p").flatten().collect();
    assert!(
        host.is_empty(),
        "written to the host directory under the pool's: {host:?}"
    );
    assert_eq!(
        text(&out.stdout),
        "['a', 'b', 'c', 'd', 'e', 'g', 'h', 'i', 'pwd.out', 'r', 'repo']\nhi\nin\none\n"
    );
    let tree = pool_tree(&b.pool, &[]);
    for (name, want) in [
        ("a", "hi\n"),
        ("b", "hi\n"),
        ("c", "up\n"),
        ("d/x", "in\n"),
        ("e", "link\n"),
        ("g", "abs\n"),
        ("h", ""),
        ("r/sub/f", "one\n"),
    ] {
        assert_file(&tree, name, want.as_bytes());
    }
    assert_file(&tree, "pwd.out", format!("{}/d\n", at.display()).as_bytes());
    assert!(tree.contains_key(b"repo/.git/HEAD".as_slice()), "git init");
    b.fsck_clean();
}

// ---- shared mappings without a mount ----

/// sqlite3 in WAL mode: its index ("-shm") is a shared mapping every connection's
/// process must see the same (no FUSE mount: the preload serves the mappings
/// itself). Two processes keep a connection open each and take turns: each insert
/// must be seen by the other's next count at once.
const SQLITE_WAL: &str = r#"
set -e
sqlite3 db.sqlite 'PRAGMA journal_mode=WAL; CREATE TABLE t(v);'
cat > worker.py <<'EOF'
import sqlite3, sys
c = sqlite3.connect("db.sqlite", timeout=30, isolation_level=None)
for line in sys.stdin:
    print(c.execute(line).fetchall(), flush=True)
EOF
cat > turns.py <<'EOF'
import subprocess
ws = [subprocess.Popen(["/usr/bin/python3", "worker.py"], stdin=subprocess.PIPE,
                       stdout=subprocess.PIPE, text=True) for _ in range(2)]
def ask(w, q):
    w.stdin.write(q + "\n")
    w.stdin.flush()
    return w.stdout.readline().strip()
seen = []
for i in range(100):
    ask(ws[i % 2], "INSERT INTO t VALUES(%d)" % i)
    seen.append(ask(ws[1 - i % 2], "SELECT count(*) FROM t"))
print(seen == ["[(%d,)]" % (i + 1) for i in range(100)])
for w in ws:
    w.stdin.close()
    w.wait()
EOF
/usr/bin/python3 turns.py
sqlite3 db.sqlite "PRAGMA integrity_check; SELECT count(*), sum(v) FROM t; PRAGMA journal_mode;"
ls
"#;

#[test]
fn sqlite3_in_wal_mode_without_a_mount() {
    let _w = watchdog("sqlite3_in_wal_mode_without_a_mount", TEST_LIMIT);
    need("sqlite3", "sqlite3");
    need("python3", "python3");
    let b = Bench::new("wal");
    let out = run_bounded(b.preloaded(SQLITE_WAL, &[]), "sqlite3 wal");
    assert!(
        out.status.success(),
        "the script fails ({}): {}",
        out.status,
        text(&out.stderr)
    );
    assert_eq!(
        text(&out.stdout),
        "wal\nTrue\nok\n100|4950\nwal\ndb.sqlite\nturns.py\nworker.py\n"
    );
    b.fsck_clean();
}

/// Issue 42, defect 7: another user's directory at the name where the memory files for
/// shared mappings went (`lynxfs-maps-UID` in the runtime directory, made with the
/// mode ours would have) stops nothing: sqlite3 in WAL mode works (it maps its "-shm"
/// file), and the directory is left alone. The runtime directory is shared, as
/// /dev/shm is (mode 1777).
#[test]
fn a_directory_another_user_planted_does_not_stop_shared_mappings() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::os::unix::process::CommandExt;
    let _w = watchdog(
        "a_directory_another_user_planted_does_not_stop_shared_mappings",
        TEST_LIMIT,
    );
    need("sqlite3", "sqlite3");
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(euid, 0, "needs root (to act as uid 1000)");
    let b = Bench::new("planted");
    let runtime = tempfile::tempdir_in("/dev/shm").expect("runtime dir");
    std::fs::set_permissions(runtime.path(), std::fs::Permissions::from_mode(0o1777))
        .expect("chmod 1777");
    let planted = runtime.path().join(format!("lynxfs-maps-{euid}"));
    let st = Command::new("mkdir")
        .args(["-m", "0700"])
        .arg(&planted)
        .uid(1000)
        .gid(1000)
        .status()
        .expect("mkdir");
    assert!(st.success(), "mkdir as uid 1000");
    let runtime_dir = runtime.path().to_str().expect("utf-8");
    let out = run_bounded(
        b.preloaded(
            "sqlite3 db 'PRAGMA journal_mode=WAL; CREATE TABLE t(v); INSERT INTO t VALUES(7); \
             SELECT sum(v) FROM t;'",
            &[("LYNXFS_RUNTIME_DIR", runtime_dir)],
        ),
        "sqlite3 wal",
    );
    assert!(
        out.status.success(),
        "sqlite3 in WAL mode failed ({}): {}",
        out.status,
        text(&out.stderr)
    );
    assert_eq!(text(&out.stdout), "wal\n7\n");
    let m = std::fs::symlink_metadata(&planted).expect("the planted directory");
    assert_eq!((m.uid(), m.mode() & 0o7777), (1000, 0o700), "left alone");
    let left: Vec<_> = std::fs::read_dir(runtime.path())
        .expect("list the runtime dir")
        .map(|e| e.expect("entry").file_name())
        .filter(|n| *n != *planted.file_name().unwrap())
        .collect();
    assert!(left.is_empty(), "runtime state left behind: {left:?}");
    b.fsck_clean();
}

// ---- programs reached through pool symlinks and scripts ----

/// Programs run by pool paths whose resolution leaves the pool (a venv's python is a
/// symlink to /usr/bin/python3), symlink chains in the pool, and scripts whose
/// interpreter is reached through the pool (pip's "#!DIR/venv/bin/python3").
const EXEC: &str = r#"
set -e
/usr/bin/python3 -m venv venv
venv/bin/python -c 'import sys; print(sys.prefix != sys.base_prefix)'
venv/bin/pip --version > /dev/null
ln -s /bin/echo e
./e outside
ln -s e e2
./e2 chain
printf '#!/bin/sh\necho script "$@"\n' > s
chmod +x s
ln -s "$PWD/s" s2
./s2 abs
printf '#!%s/s2 x\n' "$PWD" > s3
chmod +x s3
./s3 y
/usr/bin/python3 -c 'import os; os.waitpid(os.posix_spawn("./e2", ["e2", "spawned"], os.environ), 0)'
mkdir bin
ln -s ../e2 bin/found
PATH="$PWD/bin:$PATH" /usr/bin/python3 -c 'import os; os.waitpid(os.posix_spawnp("found", ["found", "on PATH"], os.environ), 0)'
"#;

#[test]
fn programs_reached_through_pool_symlinks_and_scripts_run() {
    let _w = watchdog(
        "programs_reached_through_pool_symlinks_and_scripts_run",
        TEST_LIMIT,
    );
    need("python3", "python3");
    let b = Bench::new("exec");
    let out = run_bounded(b.preloaded(EXEC, &[]), "exec");
    assert!(
        out.status.success(),
        "the script fails ({}): {}",
        out.status,
        text(&out.stderr)
    );
    assert_eq!(
        text(&out.stdout),
        "True\noutside\nchain\nscript abs\nscript x ./s3 y\nspawned\non PATH\n"
    );
    assert_eq!(std::fs::read_dir(b.d.path()).unwrap().count(), 0);
    b.fsck_clean();
}

// ---- a program killed mid-run ----

/// Churns files in its own directory until killed.
const CHURN: &str = r#"
mkdir -p churn
i=0
while :; do
  i=$((i + 1))
  echo "data $i" > churn/a$i
  mv churn/a$i churn/b$i
  mkdir churn/d$i
  rm -r churn/b$i churn/d$i
done
"#;

/// Makes 200 files in its own directory, renaming and rewriting as it goes.
const STEADY: &str = r#"
set -e
mkdir steady
for i in $(seq 1 200); do
  printf 'file %s\n' "$i" > steady/tmp
  mv steady/tmp steady/f$i
  cp steady/f$i steady/c$i
  rm steady/c$i
done
ls steady | wc -l
"#;

#[test]
fn a_program_killed_mid_run_leaves_the_others_and_the_pool_sound() {
    let _w = watchdog(
        "a_program_killed_mid_run_leaves_the_others_and_the_pool_sound",
        TEST_LIMIT,
    );
    let b = Bench::new("killed");
    let mut churn = b.preloaded(CHURN, &[]);
    let churn = spawn_group(&mut churn, "churn");
    // Let it get going: its first files appear through the engine.
    wait_for_files(&b.pool, "churn", &churn);
    let mut steady = b.preloaded(STEADY, &[]);
    let steady = spawn_group(&mut steady, "steady");
    std::thread::sleep(Duration::from_millis(300));
    kill_group(&churn);
    let killed = finish_within(churn, "churn");
    assert!(!killed.status.success(), "churn ended by itself");
    let out = finish_within(steady, "steady");
    assert!(
        out.status.success(),
        "the other program failed ({}): {}",
        out.status,
        text(&out.stderr)
    );
    assert_eq!(text(&out.stdout).trim(), "200");
    let tree = pool_tree(&b.pool, &[]);
    for i in 1..=200 {
        assert_file(
            &tree,
            &format!("steady/f{i}"),
            format!("file {i}\n").as_bytes(),
        );
    }
    let steady_files = tree.keys().filter(|k| k.starts_with(b"steady/")).count();
    assert_eq!(steady_files, 200, "steady/ holds exactly its 200 files");
    b.fsck_clean();
}

/// Each preloaded program leaves the pool as it exits (its exit handler detaches, once
/// the C library has destroyed its thread-locals): with nobody else attached, the last
/// one to leave removes the shared runtime state, so its runtime directory ends empty.
/// A program that exited without detaching would leave the state behind (the next
/// attacher takes it for a crash).
#[test]
fn preloaded_programs_detach_at_exit() {
    let _w = watchdog("preloaded_programs_detach_at_exit", TEST_LIMIT);
    let b = Bench::new("detach");
    let runtime = tempfile::tempdir_in("/dev/shm").expect("runtime dir");
    let d = b.d.path().to_str().expect("utf-8");
    let script = format!("printf 'one\\n' > {d}/f && cat {d}/f > {d}/g && stat -c %s {d}/g");
    let mut c = b.shell(&script, b.t.path(), &[]);
    c.env("LD_PRELOAD", &built().preload)
        .env("LYNXFS_POOL", &b.pool)
        .env("LYNXFS_AT", b.d.path())
        .env("LYNXFS_RUNTIME_DIR", runtime.path());
    let out = run_bounded(c, "preloaded programs");
    assert!(
        out.status.success(),
        "the programs failed ({}): {}",
        out.status,
        text(&out.stderr)
    );
    assert_eq!(text(&out.stdout).trim(), "4");
    let left: Vec<_> = std::fs::read_dir(runtime.path())
        .expect("list the runtime dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert!(left.is_empty(), "runtime state left behind: {left:?}");
    let tree = pool_tree(&b.pool, &[]);
    assert_file(&tree, "f", b"one\n");
    assert_file(&tree, "g", b"one\n");
    b.fsck_clean();
}

/// A shell that has touched the pool starts programs that take nothing of it (no pool
/// fd, no lock): its child leaves the pool before the exec, so the new program does
/// not attach at load (its maps hold no runtime state), also when the working
/// directory is in the pool (the program enters it by its path at its first pool
/// call: `pwd`, a relative create and read, a grandchild's); a child whose exec then
/// fails (a file without a `#!` line, which the shell runs itself) takes a slot
/// again and writes to the pool. The runtime directory ends empty and the pool
/// clean: no slot was left behind.
#[test]
fn children_that_take_nothing_of_the_pool_start_unattached() {
    let _w = watchdog(
        "children_that_take_nothing_of_the_pool_start_unattached",
        TEST_LIMIT,
    );
    let b = Bench::new("unattached");
    let runtime = tempfile::tempdir_in("/dev/shm").expect("runtime dir");
    let d = b.d.path().to_str().expect("utf-8");
    let t = b.t.path().to_str().expect("utf-8");
    let script = format!(
        "echo one > {d}/f && echo maps:$(grep -c state.run /proc/self/maps) && \
         printf 'echo two > {d}/g\\n' > {t}/noexec && chmod +x {t}/noexec && {t}/noexec && \
         cat {d}/g && mkdir {d}/sub && cd {d}/sub && \
         echo maps:$(grep -c state.run /proc/self/maps) && /bin/pwd && \
         sh -c 'echo three > h; /bin/pwd; cat h' && cat ../f"
    );
    let mut c = b.shell(&script, b.t.path(), &[]);
    c.env("LD_PRELOAD", &built().preload)
        .env("LYNXFS_POOL", &b.pool)
        .env("LYNXFS_AT", b.d.path())
        .env("LYNXFS_RUNTIME_DIR", runtime.path());
    let out = run_bounded(c, "preloaded shell");
    assert!(
        out.status.success(),
        "the shell failed ({}): {}{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_eq!(
        text(&out.stdout).lines().collect::<Vec<_>>(),
        [
            "maps:0",
            "two",
            "maps:0",
            &format!("{d}/sub"),
            &format!("{d}/sub"),
            "three",
            "one"
        ],
        "stderr: {}",
        text(&out.stderr)
    );
    let left: Vec<_> = std::fs::read_dir(runtime.path())
        .expect("list the runtime dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert!(left.is_empty(), "runtime state left behind: {left:?}");
    let tree = pool_tree(&b.pool, &[]);
    assert_file(&tree, "f", b"one\n");
    assert_file(&tree, "g", b"two\n");
    assert_file(&tree, "sub/h", b"three\n");
    b.fsck_clean();
}

/// A program stored in the pool, run by a shell that never touched the pool: the
/// shell's fork child attaches to read the program, and must leave the process table
/// before its exec like any attached image, not vanish from it. Otherwise the next
/// process to attach finds its slot dead and rebuilds the whole runtime state (a
/// recovery of the pool under every attached process), which bumps the runtime's
/// generation; a process attached throughout (this test) sees that.
#[test]
fn a_program_in_the_pool_started_by_an_unattached_shell_leaves_no_dead_slot() {
    let _w = watchdog("program_in_the_pool_leaves_no_dead_slot", TEST_LIMIT);
    let b = Bench::new("progslot");
    let held = Fs::open(&b.pool).expect("attach the pool for the whole test");
    let before = held.pool().runtime_generation();
    // Absolute paths from a working directory outside the pool: the shell itself
    // makes no pool call (it execs a path with a slash without looking at it).
    let d = b.d.path().to_str().expect("utf-8");
    let script = format!(
        "cp /bin/true {d}/prog && chmod +x {d}/prog && {d}/prog && {d}/prog && echo ran && \
         cat {d}/prog >/dev/null"
    );
    let out = run_bounded(
        b.preloaded_at(&script, b.d.path(), b.t.path(), &[]),
        "pool program",
    );
    assert!(
        out.status.success(),
        "the shell failed ({}): {}{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_eq!(text(&out.stdout), "ran\n", "stderr: {}", text(&out.stderr));
    assert_eq!(
        held.pool().runtime_generation(),
        before,
        "a repair of the runtime state ran: some process left a dead slot (stderr: {})",
        text(&out.stderr)
    );
    held.close().expect("detach");
    b.fsck_clean();
}

/// A fork child of an attached shell that inherits nothing of the pool takes no
/// process slot until its first pool call (issue 44); one that inherits pool fds
/// keeps using them after its parent closed them, and one
/// whose parent, the only process attached, exits before the child's first pool
/// call still finds the runtime state (the child then leaves it last). Each hand-over is
/// ordered by a FIFO, not by time. With the library before, the first check sees
/// the waiting child in the table (`processes: 3`).
#[test]
fn fork_children_join_at_their_first_pool_call() {
    let _w = watchdog("fork_children_join_at_their_first_pool_call", TEST_LIMIT);
    let b = Bench::new("forkjoin");
    let runtime = tempfile::tempdir_in("/dev/shm").expect("runtime dir");
    let d = b.d.path().to_str().expect("utf-8");
    let t = b.t.path().to_str().expect("utf-8");
    let lynxfs = built().lynxfs.to_str().expect("utf-8");
    let pool = b.pool.to_str().expect("utf-8");
    // `info` attaches too: the shell and `info` are the processes it counts.
    let count =
        format!("env -u LD_PRELOAD {lynxfs} info --json {pool} | grep -o '\"processes\": *[0-9]*'");
    let inner = format!(": < {d}/f; ( read x < {t}/late; echo four > {d}/k; cat {d}/k ) & exit 0");
    let script = format!(
        "set -e
         mkfifo {t}/go {t}/late
         echo one > {d}/f; echo two > {d}/g; : < {d}/f
         ( {count}; true )
         exec 3<{d}/f 4>>{d}/g
         ( read x < {t}/go; cat <&3; echo three >&4 ) &
         exec 3<&- 4>&-; echo > {t}/go; wait; cat {d}/g"
    );
    // The outer shell never touches the pool: the inner one is the only process
    // attached when it exits, its child still waiting.
    let last = format!("bash -c '{inner}' && echo > {t}/late");
    let mut lines = Vec::new();
    for script in [script, last] {
        let mut c = b.shell(&script, b.t.path(), &[]);
        c.env("LD_PRELOAD", &built().preload)
            .env("LYNXFS_POOL", &b.pool)
            .env("LYNXFS_AT", b.d.path())
            .env("LYNXFS_RUNTIME_DIR", runtime.path());
        let out = run_bounded(c, "preloaded shell");
        assert!(
            out.status.success(),
            "the shell failed ({}): {}{}",
            out.status,
            text(&out.stdout),
            text(&out.stderr)
        );
        lines.extend(text(&out.stdout).lines().map(|l| l.replace(' ', "")));
    }
    assert_eq!(lines, ["\"processes\":2", "one", "two", "three", "four"]);
    // The last child's output ends before its detach at exit, which nobody waits for.
    let start = Instant::now();
    let left = loop {
        let left: Vec<_> = std::fs::read_dir(runtime.path())
            .expect("list the runtime dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        if left.is_empty() || start.elapsed() > LIMIT {
            break left;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(left.is_empty(), "runtime state left behind: {left:?}");
    let tree = pool_tree(&b.pool, &[]);
    assert_file(&tree, "f", b"one\n");
    assert_file(&tree, "g", b"two\nthree\n");
    assert_file(&tree, "k", b"four\n");
    b.fsck_clean();
}

/// Files unlinked while open, inherited by a fork child whose parent closes them at
/// once: the child still reads them (the parent counts the child's references before
/// the fork), itself and through a program it execs, and the inodes and blocks are
/// not reused meanwhile by the files the parent then creates. The child waits on a
/// FIFO until the parent has closed and created. Before, the parent's close freed
/// them: the child read another file's bytes, and `cat` waited forever on a bare
/// eventfd (this test's time limit).
#[test]
fn a_fork_child_keeps_unlinked_files_its_parent_closed() {
    let _w = watchdog("unlinked_files_the_parent_closed", TEST_LIMIT);
    let b = Bench::new("unlinkedfork");
    let t = b.t.path().to_str().expect("utf-8");
    let script = format!(
        "mkfifo {t}/go && echo one > f && echo two > g && exec 3<f 4<g && rm f g && \
         {{ ( read x < {t}/go; read l <&3; echo \"read:$l\"; exec cat <&4 ) & }} && \
         exec 3<&- 4<&- && for i in 1 2 3 4 5 6 7 8; do echo other$i > o$i; done && \
         echo go > {t}/go && wait"
    );
    let out = run_bounded(b.preloaded(&script, &[]), "unlinked files across a fork");
    assert!(
        out.status.success(),
        "the shell failed ({}): {}{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_eq!(
        text(&out.stdout),
        "read:one\ntwo\n",
        "stderr: {}",
        text(&out.stderr)
    );
    let tree = pool_tree(&b.pool, &[]);
    for i in 1..=8 {
        assert_file(&tree, &format!("o{i}"), format!("other{i}\n").as_bytes());
    }
    b.fsck_clean();
}

/// Waits (within [`LIMIT`]) until the pool has a non-empty directory `dir`.
fn wait_for_files(pool: &Path, dir: &str, child: &Child) {
    let start = Instant::now();
    loop {
        let tree = pool_tree(pool, &[]);
        let prefix = format!("{dir}/");
        if tree.keys().any(|k| k.starts_with(prefix.as_bytes())) {
            return;
        }
        if start.elapsed() > LIMIT {
            kill_group(child);
            panic!("{dir}: nothing appeared in the pool within {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

// ---- the comparison itself ----

#[test]
fn the_comparison_sees_every_kind_of_difference() {
    let _w = watchdog("the_comparison_sees_every_kind_of_difference", TEST_LIMIT);
    let a = tempfile::tempdir_in("/dev/shm").unwrap();
    let b = tempfile::tempdir_in("/dev/shm").unwrap();
    let setup = "set -e; mkdir d; echo x > d/f; echo y > d/g; ln d/f d/h; ln -s f d/l; \
                 touch -d 2001-01-01 d/g";
    for dir in [a.path(), b.path()] {
        let o = run_bounded(
            {
                let mut c = Command::new("/bin/sh");
                c.arg("-c").arg(setup).current_dir(dir);
                c
            },
            "setup",
        );
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
    let keep = ["d/g"];
    assert!(differences(&disk_tree(a.path(), &keep), &disk_tree(b.path(), &keep)).is_empty());
    let changes: [(&str, &str); 6] = [
        ("chmod 600 d/f", "d/f"),
        ("echo z > d/g; touch -d 2001-01-01 d/g", "d/g"),
        ("rm d/h; echo x > d/h", "d/h"),
        ("rm d/l; ln -s g d/l", "d/l"),
        ("touch -d 2002-01-01 d/g", "d/g"),
        ("mkdir d/new", "unexpected: d/new"),
    ];
    for (change, want) in changes {
        let c = tempfile::tempdir_in("/dev/shm").unwrap();
        let script = format!("{setup}; {change}");
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c").arg(&script).current_dir(c.path());
        assert!(run_bounded(cmd, "change").status.success());
        let d = differences(&disk_tree(c.path(), &keep), &disk_tree(a.path(), &keep));
        assert!(
            d.iter().any(|l| l.starts_with(want)),
            "{change}: want a difference at {want}, got {d:?}"
        );
    }
}

// ---- FIEMAP: filefrag on a sparse file ----

/// A sparse file (data at blocks 0, 256-258, 300 and 768-769 of a file of 800 blocks),
/// its extents as `filefrag -v` prints them, and its data segments as python's
/// lseek(SEEK_DATA/SEEK_HOLE) finds them.
const SPARSE: &str = r#"
set -e
dd if=/dev/urandom of=sp bs=4k count=1 status=none
for at in 256:3 300:1 768:2; do
  dd if=/dev/urandom of=sp bs=4k seek=${at%:*} count=${at#*:} conv=notrunc status=none
done
truncate -s $((800 * 4096)) sp
/usr/sbin/filefrag -v sp
python3 -c '
import os
fd = os.open("sp", os.O_RDONLY)
at = 0
while True:
    try:
        d = os.lseek(fd, at, os.SEEK_DATA)
    except OSError:
        break
    at = os.lseek(fd, d, os.SEEK_HOLE)
    print("segment", d, at)
'
"#;

/// One row of `filefrag -v`'s table: logical block, physical block, blocks, flags.
fn filefrag_rows(out: &str) -> Vec<(u64, u64, u64, String)> {
    out.lines()
        .filter_map(|l| {
            let (n, rest) = l.trim().split_once(':')?;
            n.parse::<u32>().ok()?;
            let f: Vec<&str> = rest.split(':').map(str::trim).collect();
            let first = |r: &str| r.split("..").next()?.trim().parse::<u64>().ok();
            let flags = if f.len() > 4 { f[4] } else { f[3] };
            Some((
                first(f[0])?,
                first(f[1])?,
                f[2].parse().ok()?,
                flags.to_string(),
            ))
        })
        .collect()
}

/// `filefrag -v` under `lynxfs run` lists what the engine says of the file's extents
/// (FS_IOC_FIEMAP and FIGETBSZ answered by the preload: the kernel would send neither
/// to a FUSE daemon), the last flagged, and the data SEEK_DATA/SEEK_HOLE find is
/// what those extents cover.
#[test]
fn filefrag_lists_the_extents_the_engine_has() {
    let _w = watchdog("filefrag", TEST_LIMIT);
    assert!(
        Path::new("/usr/sbin/filefrag").exists(),
        "/usr/sbin/filefrag is missing: install it (apt-get install e2fsprogs)"
    );
    need("python3", "python3");
    let b = Bench::new("filefrag");
    let out = run_bounded(b.preloaded(SPARSE, &[]), "filefrag");
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "filefrag ({}): {}{stdout}",
        out.status,
        text(&out.stderr)
    );
    let rows = filefrag_rows(&stdout);
    let fs = Fs::open(&b.pool).unwrap();
    let s = fs.session(Cred::root());
    let fd = s.open("/sp", libc::O_RDONLY, 0).unwrap();
    let block = 4096;
    let engine: Vec<(u64, u64, u64)> = fs
        .extents(fd, 0, u64::MAX)
        .unwrap()
        .iter()
        .map(|e| (e.logical / block, e.physical / block, e.length / block))
        .collect();
    fs.close_fd(fd).unwrap();
    fs.close().unwrap();
    let listed: Vec<(u64, u64, u64)> = rows.iter().map(|r| (r.0, r.1, r.2)).collect();
    assert_eq!(listed, engine, "filefrag printed:\n{stdout}");
    assert!(
        rows.last().is_some_and(|r| r.3.contains("last")),
        "{stdout}"
    );
    assert!(
        rows[..rows.len() - 1].iter().all(|r| !r.3.contains("last")),
        "{stdout}"
    );
    // The data lseek finds: the extents joined where they follow each other in the file.
    let mut joined: Vec<(u64, u64)> = Vec::new();
    for &(l, _, n) in &listed {
        match joined.last_mut() {
            Some((_, end)) if *end == l * block => *end += n * block,
            _ => joined.push((l * block, (l + n) * block)),
        }
    }
    let segments: Vec<(u64, u64)> = stdout
        .lines()
        .filter_map(|l| {
            let mut w = l.strip_prefix("segment ")?.split(' ');
            Some((w.next()?.parse().ok()?, w.next()?.parse().ok()?))
        })
        .collect();
    assert_eq!(segments, joined, "{stdout}");
    assert_eq!(
        joined,
        [
            (0, block),
            (256 * block, 259 * block),
            (300 * block, 301 * block),
            (768 * block, 770 * block)
        ]
    );
}
