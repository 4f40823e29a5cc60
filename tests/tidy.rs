//! Tidy tests: rules about the source tree itself, in the spirit of rust-analyzer's tidy tests.
//! Each names the ARCHITECTURE.md invariant it keeps and fails with what to do instead.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every `.rs` file under `src/<area>` (`""`: all of `src`), as (path from the crate root, text),
/// in a stable order.
fn sources(area: &str) -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src").join(area), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(&file).expect("read source");
            let rel = file
                .strip_prefix(root)
                .expect("under the root")
                .display()
                .to_string();
            (rel, text)
        })
        .collect()
}

/// Code lines of `src/<area>`, without comments and without `#[cfg(test)]` modules (a test may
/// hold whatever it likes): (path, line number, code).
fn runtime_lines(area: &str) -> Vec<(String, usize, String)> {
    let mut out = Vec::new();
    for (rel, text) in sources(area) {
        for (n, line) in text.lines().enumerate() {
            if line.trim_start() == "#[cfg(test)]" {
                break;
            }
            let code = line.split("//").next().unwrap_or("");
            out.push((rel.clone(), n + 1, code.to_owned()));
        }
    }
    out
}

/// Architecture Invariant: one actor owns the supervisor's mutable state. The only locks in the
/// supervisor and the process-tree boundary are the four named here, none but the async guardian reader held across an
/// await (clippy's `await_holding_lock` is denied in Cargo.toml).
#[test]
fn the_supervisor_holds_no_lock_but_the_four_it_documents() {
    let allowed = [
        // The journal's writer: an append or a manifest read at a time.
        ("src/supervisor/mod.rs", "lifecycle: Mutex<Lifecycle>"),
        // A live process's output: written by its drain, read by pollers.
        ("src/supervisor/process.rs", "output: Mutex<Option<Output>>"),
        // The leader's reaping, fenced against signals to its group id.
        ("src/tree/group.rs", "exit: Mutex<Option<LeaderExit>>"),
        // A guardian's control socket: one reader at a time (an async lock, held across the
        // read it fences; what it reads is published through a watch channel).
        (
            "src/tree/guardian/mod.rs",
            "reader: tokio::sync::Mutex<ControlReader>",
        ),
        (
            "src/tree/guardian/mod.rs",
            "reader: tokio::sync::Mutex::new(ControlReader",
        ),
    ];
    let mut found = Vec::new();
    for area in ["supervisor", "tree"] {
        for (file, line, code) in runtime_lines(area) {
            let declares = [
                "Mutex<",
                "RwLock<",
                "Mutex::new",
                "RwLock::new",
                "OnceCell<",
            ]
            .iter()
            .any(|t| code.contains(t));
            let is_helper = code.contains("fn lock<T>") || code.contains("m: &Mutex<T>");
            if declares && !is_helper {
                found.push((file, line, code.trim().to_owned()));
            }
        }
    }
    let unexpected: Vec<_> = found
        .iter()
        .filter(|(file, _, code)| {
            !allowed
                .iter()
                .any(|(f, decl)| file == f && code.contains(decl))
                && !code.contains("Mutex::new(None)")
                && !code.contains("Mutex::new(lifecycle)")
        })
        .collect();
    assert!(
        unexpected.is_empty(),
        "new shared mutable state in the supervisor: {unexpected:#?}\n\
         Give it to the actor (src/supervisor/actor.rs) and reach it with a message, or pass it \
         to the one task that owns it (ARCHITECTURE.md, 'one owner')."
    );
    for (file, decl) in allowed {
        assert!(
            found.iter().any(|(f, _, c)| f == file && c.contains(decl)),
            "{file} no longer declares {decl}: update this test and ARCHITECTURE.md"
        );
    }
}

/// Architecture Invariant: every task the supervisor runs is spawned into the actor's task set,
/// so shutdown joins it. Outside actor.rs the supervisor spawns exactly one task: the actor.
#[test]
fn every_supervisor_task_is_spawned_by_the_actor() {
    let mut spawns = Vec::new();
    for area in ["supervisor", "tree"] {
        for (file, line, code) in runtime_lines(area) {
            let spawns_task = code.contains("tokio::spawn(")
                || code.contains("task::spawn(")
                || code.contains("JoinSet")
                || code.contains("std::thread::spawn")
                || code.contains(".spawn(async");
            if spawns_task && file != "src/supervisor/actor.rs" {
                spawns.push((file, line, code.trim().to_owned()));
            }
        }
    }
    assert_eq!(
        spawns.len(),
        1,
        "tasks spawned outside the actor: {spawns:#?}\nSpawn them into the actor's set \
         (src/supervisor/actor.rs) so that shutdown joins them."
    );
    assert_eq!(spawns[0].0, "src/supervisor/mod.rs");
    assert!(spawns[0].2.contains("actor.run()"), "{spawns:?}");
}

/// Architecture Invariant: the process-tree boundary is the only place that signals, spawns
/// or waits for processes.
#[test]
fn only_the_tree_boundary_touches_processes() {
    let offenders: Vec<String> = runtime_lines("")
        .into_iter()
        .filter(|(rel, _, _)| !rel.starts_with("src/tree/") && !rel.starts_with("src/cli/"))
        .filter(|(_, _, code)| {
            [
                "killpg(",
                "signal::kill(",
                "posix_spawn",
                "process::Command::new",
                "waitpid(",
            ]
            .iter()
            .any(|t| code.contains(t))
        })
        .map(|(rel, n, code)| format!("{rel}:{n}: {}", code.trim()))
        .collect();
    assert!(
        offenders.is_empty(),
        "process handling outside src/tree: {offenders:#?}"
    );
}

/// Architecture Invariant: `unsafe` appears only where a crate's API forces it (the journal's
/// mapping; the spawn actions and the reactor registration nix and tokio offer only as unsafe;
/// the `clone3(CLONE_INTO_CGROUP)` fork that nix and rustix do not wrap),
/// and every block says why it is sound in a `// SAFETY:` comment just above it.
#[test]
fn unsafe_code_is_confined_and_justified() {
    let allowed = [
        "src/journal/mmap.rs",
        "src/tree/spawn.rs",
        "src/tree/group.rs",
        "src/tree/cgroup.rs",
        "src/tree/guardian/run.rs",
    ];
    for (rel, text) in sources("") {
        let lines: Vec<&str> = text.lines().collect();
        for (n, line) in lines.iter().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if code.contains("allow(unsafe_code)") {
                assert!(
                    allowed.contains(&rel.as_str()),
                    "{rel}:{}: unsafe allowed here",
                    n + 1
                );
            }
            let opens_block = code.contains("unsafe {") || code.contains("unsafe{");
            if opens_block {
                let above = &lines[n.saturating_sub(8)..n];
                assert!(
                    above
                        .iter()
                        .any(|l| l.trim_start().starts_with("// SAFETY:")),
                    "{rel}:{}: an unsafe block without a // SAFETY: comment above it",
                    n + 1
                );
            }
        }
    }
}
