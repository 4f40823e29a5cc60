//! A runtime root on a machine shared with other local users: the real binary, run as root,
//! against roots and parent directories that a second user (created here with `useradd`, and
//! removed again) owns or could write, with symbolic links planted where procjournal writes.
//! procjournal refuses, and nothing is created, changed or appended outside the root; what it
//! creates is private (or shared read-only with the group asked for), checked by mode and by
//! reading it as the other user.

use crate::common::daemon as daemon_common;

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use daemon_common::{Daemon, bin};

/// `useradd` and `groupadd` lock the account files: one at a time within this binary.
static ACCOUNTS: Mutex<()> = Mutex::new(());

/// A local user (and maybe a group) that exists for one test.
struct User {
    name: String,
    uid: u32,
    gid: u32,
    group: Option<String>,
}

fn tool(name: &str) -> Option<PathBuf> {
    ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
        .iter()
        .map(|dir| Path::new(dir).join(name))
        .find(|p| p.exists())
}

fn status(command: &mut Command) -> bool {
    command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl User {
    /// A new user `tag`, in a new group too when `with_group`; `None`, with the reason printed,
    /// where the test cannot act as another user.
    fn create(tag: &str, with_group: bool) -> Option<User> {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: not root, so no second user can own a root here");
            return None;
        }
        let (Some(useradd), Some(_), Some(_)) = (tool("useradd"), tool("userdel"), tool("setpriv"))
        else {
            eprintln!("skipped: useradd, userdel or setpriv is not installed");
            return None;
        };
        let _accounts = ACCOUNTS.lock().unwrap_or_else(|e| e.into_inner());
        let name = format!("pj{tag}{}", std::process::id());
        let group = with_group.then(|| format!("{name}g"));
        if let Some(group) = &group {
            assert!(
                status(Command::new(tool("groupadd")?).arg(group)),
                "groupadd {group}"
            );
        }
        let mut add = Command::new(useradd);
        add.args(["-M", "-s", "/usr/sbin/nologin"]);
        if let Some(group) = &group {
            add.args(["-G", group]);
        }
        assert!(status(add.arg(&name)), "useradd {name}");
        let user = nix::unistd::User::from_name(&name).unwrap().unwrap();
        Some(User {
            name,
            uid: user.uid.as_raw(),
            gid: user.gid.as_raw(),
            group,
        })
    }

    /// Runs `args` as this user (its own groups), returning (success, stdout).
    fn run(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new(tool("setpriv").unwrap())
            .args([
                "--reuid",
                &self.uid.to_string(),
                "--regid",
                &self.gid.to_string(),
            ])
            .arg("--init-groups")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    fn group_gid(&self) -> u32 {
        let name = self.group.as_deref().unwrap();
        nix::unistd::Group::from_name(name)
            .unwrap()
            .unwrap()
            .gid
            .as_raw()
    }
}

impl Drop for User {
    fn drop(&mut self) {
        let _accounts = ACCOUNTS.lock().unwrap_or_else(|e| e.into_inner());
        let _ = status(Command::new(tool("userdel").unwrap()).arg(&self.name));
        if let (Some(group), Some(groupdel)) = (&self.group, tool("groupdel")) {
            let _ = status(Command::new(groupdel).arg(group));
        }
    }
}

/// A directory the test owns that others may enter (`0755`), so that a refusal to read what is
/// under a root comes from the root's own mode, not from the temporary directory's.
fn open_base() -> tempfile::TempDir {
    let base = tempfile::tempdir().unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    base
}

fn chown(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid)).unwrap();
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

/// `procjournal ARGS...` with `--root ROOT` after the subcommand; (exit code, stderr).
fn procjournal(sub: &str, root: &Path, args: &[&str]) -> (i32, String) {
    let out = bin()
        .arg(sub)
        .arg("--root")
        .arg(root)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What lies outside every root: a secret file, a place a `LOCK` link points to (absent), and
/// two directories that links for `journal/` and `spool/` point to (empty).
struct Outside {
    dir: tempfile::TempDir,
}

const SECRET: &[u8] = b"root's secret\n";

impl Outside {
    fn new() -> Outside {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("secret"), SECRET).unwrap();
        for sub in ["journal", "spool", "snapshots"] {
            std::fs::create_dir(dir.path().join(sub)).unwrap();
        }
        Outside { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Plants the link `root/name` to its target outside.
    fn plant(&self, root: &Path, name: &str) {
        let target = match name {
            "LOCK" => self.path("x"),
            "daemon.log" => self.path("secret"),
            other => self.path(other),
        };
        symlink(target, root.join(name)).unwrap();
    }

    fn assert_untouched(&self) {
        assert!(!self.path("x").exists(), "LOCK's link target was created");
        assert_eq!(std::fs::read(self.path("secret")).unwrap(), SECRET);
        for sub in ["journal", "spool", "snapshots"] {
            let entries: Vec<_> = std::fs::read_dir(self.path(sub)).unwrap().collect();
            assert!(entries.is_empty(), "{sub}/ outside got {entries:?}");
        }
    }
}

/// The writers, each once: a foreground run, a detached daemon behind `start` (its stdio goes
/// to daemon.log), and `serve` with its log in the root. Each must be refused.
fn assert_every_writer_refused(root: &Path, expect: &str) {
    let (code, err) = procjournal("run", root, &["--", "echo", "hi"]);
    assert_eq!(code, 125, "run: {err}");
    assert!(err.contains(expect), "run: {err}");
    let (code, err) = procjournal("start", root, &["--", "echo", "hi"]);
    assert_ne!(code, 0, "start: {err}");
    let (code, err) = procjournal("serve", root, &["--log-file"]);
    assert_ne!(code, 0, "serve: {err}");
    assert!(err.contains(expect), "serve: {err}");
}

#[test]
fn a_root_another_user_owns_is_refused_and_its_links_are_not_followed() {
    let Some(other) = User::create("own", false) else {
        return;
    };
    let base = open_base();
    let outside = Outside::new();
    let root = base.path().join("root");
    std::fs::create_dir(&root).unwrap();
    for name in ["LOCK", "daemon.log", "journal", "spool"] {
        outside.plant(&root, name);
    }
    chown(&root, other.uid, other.gid);
    assert_every_writer_refused(&root, &format!("is owned by uid {}", other.uid));
    outside.assert_untouched();
}

#[test]
fn a_parent_another_user_owns_or_may_write_is_refused() {
    let Some(other) = User::create("par", false) else {
        return;
    };
    let base = open_base();
    let outside = Outside::new();

    // Owned by the other user: neither an existing root in it nor a new one is opened.
    let theirs = base.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    let existing = theirs.join("existing");
    std::fs::create_dir(&existing).unwrap();
    std::fs::set_permissions(&existing, std::fs::Permissions::from_mode(0o700)).unwrap();
    outside.plant(&existing, "LOCK");
    chown(&theirs, other.uid, other.gid);
    assert_every_writer_refused(&existing, "is owned by uid");
    let (code, err) = procjournal("run", &theirs.join("new"), &["--", "true"]);
    assert_eq!(code, 125, "{err}");
    assert!(
        !theirs.join("new").exists(),
        "a root was created under their directory"
    );

    // Ours but world-writable without the sticky bit: anyone could swap the root.
    let open = base.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (code, err) = procjournal("run", &open.join("root"), &["--", "true"]);
    assert_eq!(code, 125, "{err}");
    assert!(err.contains("writable by its group or by others"), "{err}");
    assert!(!open.join("root").exists());
    outside.assert_untouched();

    // Root's and sticky, as /tmp is: others cannot rename what is ours in it.
    let sticky = base.path().join("sticky");
    std::fs::create_dir(&sticky).unwrap();
    std::fs::set_permissions(&sticky, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let (code, err) = procjournal("run", &sticky.join("root"), &["--", "true"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(mode(&sticky.join("root")), 0o700);
}

#[test]
fn links_planted_in_a_root_are_refused_not_followed() {
    // Only root or this user can plant them in a root that passes the ownership checks; they are
    // refused all the same.
    for name in ["LOCK", "daemon.log", "journal", "spool", "snapshots"] {
        let base = tempfile::tempdir().unwrap();
        let outside = Outside::new();
        let root = base.path().join("root");
        std::fs::create_dir(&root).unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700)).unwrap();
        outside.plant(&root, name);
        let (run, run_err) = procjournal("run", &root, &["--", "echo", "hi"]);
        let (serve, serve_err) = procjournal("serve", &root, &["--log-file"]);
        let (start, start_err) = procjournal("start", &root, &["--", "echo", "hi"]);
        // daemon.log is only a writer's log: `run` does not open it.
        if name != "daemon.log" {
            assert_eq!(run, 125, "{name}: run: {run_err}");
        }
        assert_ne!(serve, 0, "{name}: serve: {serve_err}");
        assert_ne!(start, 0, "{name}: start: {start_err}");
        outside.assert_untouched();
    }
}

/// Every entry under `root` (not `root` itself), with its metadata.
fn walk(root: &Path) -> Vec<(PathBuf, std::fs::Metadata)> {
    let mut found = Vec::new();
    let mut todo = vec![root.to_owned()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                todo.push(path.clone());
            }
            found.push((path, meta));
        }
    }
    found
}

/// The first spool segment under `root`.
fn a_spool_segment(root: &Path) -> PathBuf {
    walk(&root.join("spool"))
        .into_iter()
        .map(|(path, _)| path)
        .find(|p| p.extension().is_some_and(|e| e == "seg"))
        .expect("a spool segment")
}

#[test]
fn everything_created_is_private_and_another_user_cannot_read_it() {
    let Some(other) = User::create("rd", false) else {
        return;
    };
    let base = open_base();
    let root = base.path().join("root");
    let (code, err) = procjournal("run", &root, &["--", "echo", "the-output"]);
    assert_eq!(code, 0, "{err}");
    let daemon = Daemon::start_with(&root, &["--log-file"]);
    let (code, err) = procjournal("start", &root, &["--", "echo", "more-output"]);
    assert_eq!(code, 0, "{err}");

    assert_eq!(mode(&root), 0o700);
    let mut kinds = Vec::new();
    for (path, meta) in walk(&root) {
        let (kind, want) = if meta.is_dir() {
            ("dir", 0o700)
        } else if meta.file_type().is_socket() {
            ("socket", 0o600)
        } else {
            assert!(
                meta.is_file(),
                "{} is neither file, dir nor socket",
                path.display()
            );
            ("file", 0o600)
        };
        assert_eq!(mode(&path), want, "{kind} {}", path.display());
        kinds.push(path.file_name().unwrap().to_string_lossy().into_owned());
    }
    for expected in [
        "LOCK",
        "journal",
        "spool",
        "daemon.log",
        "procjournal.sock",
        "trees",
    ] {
        assert!(
            kinds.iter().any(|k| k == expected),
            "no {expected} in {kinds:?}"
        );
    }

    let segment = a_spool_segment(&root);
    let journal = root.join("journal");
    let path = |p: &Path| p.to_str().unwrap().to_owned();
    // As root the same reads work: what fails for the other user is its access alone.
    assert!(std::fs::read(&segment).is_ok());
    for target in [&segment, &journal, &root.join("daemon.log")] {
        let (read, out) = other.run(&["cat", &path(target)]);
        assert!(
            !read && out.is_empty(),
            "{} read as another user",
            target.display()
        );
    }
    let (listed, out) = other.run(&["ls", &path(&root)]);
    assert!(
        !listed && out.is_empty(),
        "the root was listed by another user: {out}"
    );
    drop(daemon);
}

#[test]
fn the_default_root_and_the_directories_made_for_it_are_private() {
    let base = open_base();
    let home = base.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let out = bin()
        .args(["run", "--", "true"])
        .env("HOME", &home)
        .env_remove("PROCJOURNAL_ROOT")
        .env_remove("XDG_STATE_HOME")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for dir in [".local", ".local/state", ".local/state/procjournal"] {
        assert_eq!(mode(&home.join(dir)), 0o700, "{dir}");
    }
}

#[test]
fn an_existing_world_readable_root_is_tightened_on_open() {
    let base = open_base();
    let root = base.path().join("root");
    let (code, err) = procjournal("run", &root, &["--", "true"]);
    assert_eq!(code, 0, "{err}");
    // As an older procjournal left it.
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(root.join("LOCK"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, err) = procjournal("run", &root, &["--", "true"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(mode(&root), 0o700);
    assert_eq!(mode(&root.join("LOCK")), 0o600);
}

#[test]
fn group_shares_the_root_read_only_with_that_group_alone() {
    let Some(member) = User::create("grp", true) else {
        return;
    };
    let Some(outsider) = User::create("out", false) else {
        return;
    };
    let group = member.group.clone().unwrap();
    let gid = member.group_gid();
    let base = open_base();
    let root = base.path().join("root");
    let (code, err) = procjournal("run", &root, &["--group", &group, "--", "echo", "shared"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(mode(&root), 0o2750);
    for (path, meta) in
        std::iter::once((root.clone(), std::fs::metadata(&root).unwrap())).chain(walk(&root))
    {
        let want = if meta.is_dir() { 0o2750 } else { 0o640 };
        assert_eq!(mode(&path), want, "{}", path.display());
        assert_eq!(meta.gid(), gid, "{}", path.display());
    }
    let segment = a_spool_segment(&root);
    let segment = segment.to_str().unwrap();
    let (read, out) = member.run(&["cat", segment]);
    assert!(
        read && out.contains("shared"),
        "the group member could not read: {out:?}"
    );
    let (read, out) = outsider.run(&["cat", segment]);
    assert!(!read && out.is_empty(), "another user read a group root");
    let (wrote, _) = member.run(&["touch", root.join("planted").to_str().unwrap()]);
    assert!(!wrote, "the group could write in the root");

    // A later writer without --group keeps the root as it was shared.
    let (code, err) = procjournal("run", &root, &["--", "true"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(mode(&root), 0o2750);
}

/// Names a directory under a root: what a layer opened it as, and where its path is moved.
fn swap_for_a_link(dir: &Path, elsewhere: &Path) -> PathBuf {
    let moved = dir.with_extension("moved");
    std::fs::rename(dir, &moved).unwrap();
    std::fs::create_dir_all(elsewhere).unwrap();
    symlink(elsewhere, dir).unwrap();
    moved
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The journal and a spool keep writing in the directory they opened, whatever its path
/// names later: segments created, renamed and removed after the path was swapped for a link
/// all land in the original directory, and nothing appears where the link points.
#[test]
fn layers_write_in_the_directory_they_opened_never_by_its_path_again() {
    use procjournal::spool::format::Stream;
    use procjournal::spool::{Spool, SpoolOptions};
    use procjournal::{Durability, EventId, EventKind, Journal, JournalOptions};
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("root");
    let options = JournalOptions {
        durability: Durability::Sync,
        segment_bytes: 4096,
    };
    let (journal, _) = Journal::open(&root, options.clone()).unwrap();
    let kind = EventKind::new(3).unwrap();
    let append = |i: u32| {
        let mut id = [0u8; 16];
        id[..4].copy_from_slice(&i.to_le_bytes());
        journal
            .append(EventId::from_bytes(id), kind, 1, &[7; 200])
            .unwrap()
    };
    append(1);
    let journal_elsewhere = base.path().join("journal-elsewhere");
    let journal_moved = swap_for_a_link(&root.join("journal"), &journal_elsewhere);
    let last = (2..=200).map(append).last().unwrap();
    let compacted = journal.compact_below(last.position.seq).unwrap();
    assert!(compacted.removed_segments > 0, "{compacted:?}");
    let held = names(&journal_moved);
    // Segments created after the swap, the floor written, the old ones removed: all here.
    let first = "00000000000000000000.log";
    assert!(
        held.iter().any(|n| n.ends_with(".log") && n != first),
        "{held:?}"
    );
    assert!(!held.iter().any(|n| n == first), "{held:?}");
    assert!(held.iter().any(|n| n == "FLOOR"), "{held:?}");
    assert_eq!(names(&journal_elsewhere), Vec::<String>::new());
    drop(journal);

    let spool_dir = base.path().join("spool-of-one");
    let spool_options = SpoolOptions {
        segment_bytes: 4096,
        retention_bytes: 16 * 1024,
    };
    let (mut spool, _) = Spool::open_writer(&spool_dir, [3; 16], spool_options).unwrap();
    spool.append(Stream::Stdout, &[b'x'; 1000]).unwrap();
    spool.checkpoint().unwrap();
    let spool_elsewhere = base.path().join("spool-elsewhere");
    let spool_moved = swap_for_a_link(&spool_dir, &spool_elsewhere);
    for _ in 0..100 {
        spool.append(Stream::Stdout, &[b'y'; 1000]).unwrap();
    }
    spool.checkpoint().unwrap();
    assert!(spool.retained_from() > 0, "retention removed old segments");
    let held = names(&spool_moved);
    assert!(held.len() > 2, "{held:?}");
    assert_eq!(names(&spool_elsewhere), Vec::<String>::new());
    drop(spool);

    // Opened again, the link is refused rather than followed.
    let err = Journal::open(&root, options).unwrap_err().to_string();
    assert!(err.contains("symbolic link"), "{err}");
    let err = Spool::open_writer(&spool_dir, [3; 16], spool_options).unwrap_err();
    assert!(err.to_string().contains("directory"), "{err}");
}
