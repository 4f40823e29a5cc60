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

/// A file's path from the crate root `root`, and its text.
fn read_relative(root: &Path, file: &Path) -> (String, String) {
    let text = std::fs::read_to_string(file).expect("read source");
    let rel = file.strip_prefix(root).expect("under the root");
    (rel.display().to_string(), text)
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
        .map(|file| read_relative(root, &file))
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
        ("src/supervisor/shared.rs", "lifecycle: Lock<Lifecycle>"),
        // A live process's output: written by its drain, read by pollers.
        ("src/supervisor/process.rs", "output: Lock<Option<Output>>"),
        // The leader's reaping, fenced against signals to its group id.
        ("src/tree/group.rs", "exit: Lock<Option<LeaderExit>>"),
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
        // A launcher's guardian zygote: one request and its answer at a time on its socket.
        (
            "src/tree/guardian/zygote.rs",
            "zygote: Lock<Option<Zygote>>",
        ),
    ];
    let mut found = Vec::new();
    for area in ["supervisor", "tree"] {
        for (file, line, code) in runtime_lines(area) {
            // `Lock` as a word: `OnceLock` is a write-once cell, not a lock.
            let names_lock = ["Lock<", "Lock::new"].iter().any(|t| {
                code.match_indices(t)
                    .any(|(i, _)| !code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_'))
            });
            let declares = names_lock
                || [
                    "Mutex<",
                    "RwLock<",
                    "Mutex::new",
                    "RwLock::new",
                    "OnceCell<",
                ]
                .iter()
                .any(|t| code.contains(t));
            if declares {
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
                && !code.contains("Lock::new(None)")
                && !code.contains("Lock::new(lifecycle)")
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

/// The house rules of clippy.toml (processes only through src/tree, locks only as
/// `crate::sync::Lock`) hold because their exceptions are few and named: here, each with the
/// lint it lifts. A new exception in the library fails this test until it is added with its
/// reason; tests, benches and examples lift both rules at their crate roots.
#[test]
fn clippy_house_rule_exceptions_are_the_named_ones() {
    let allowed = [
        ("src/lib.rs", "disallowed_methods"),
        ("src/lib.rs", "disallowed_types"),
        ("src/tree/mod.rs", "disallowed_methods"),
        ("src/cli/mod.rs", "disallowed_methods"),
        ("src/sync.rs", "disallowed_types"),
    ];
    let mut found = Vec::new();
    for (file, _, code) in runtime_lines("") {
        for lint in ["disallowed_methods", "disallowed_types"] {
            if code.contains(&format!("clippy::{lint}")) {
                found.push((file.clone(), lint));
            }
        }
    }
    found.sort();
    found.dedup();
    let mut expected: Vec<_> = allowed.iter().map(|(f, l)| ((*f).to_owned(), *l)).collect();
    expected.sort();
    assert_eq!(
        found, expected,
        "exceptions to clippy.toml's house rules changed"
    );
    let config = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("clippy.toml"))
        .expect("clippy.toml");
    for path in [
        "std::process::Command::spawn",
        "nix::sys::signal::kill",
        "std::sync::Mutex",
    ] {
        assert!(
            config.contains(&format!("path = \"{path}\"")),
            "clippy.toml lost {path}"
        );
    }
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

/// Architecture Invariant: the surfaces' features (`cli`, `server`, `mcp`, `schema`) add modules
/// and schema derives, never a branch in the library's core. `.ci/run` relies on it: it lints
/// the library alone with its tests but runs the tests once, with the default features, since
/// they are the same tests of the same code. The feature gates allowed in the core are the
/// schema derive, `schema` on an item only the schemas use, and `cli` on a module declaration.
#[test]
fn the_surfaces_add_no_branch_to_the_core() {
    let core = [
        "journal",
        "spool",
        "lifecycle",
        "supervisor",
        "tree",
        "admission",
        "root",
    ];
    let mut files = sources("");
    files.retain(|(rel, _)| {
        let top = rel.trim_start_matches("src/");
        core.iter().any(|area| {
            top.starts_with(&format!("{area}/")) || top == format!("{area}.rs").as_str()
        })
    });
    assert!(files.len() > 50, "the core's files were not found");
    let mut offenders = Vec::new();
    for (rel, text) in &files {
        let lines: Vec<&str> = text.lines().collect();
        for (n, line) in lines.iter().enumerate() {
            let code = line.split("//").next().unwrap_or("").trim();
            let gated = ["cli", "server", "mcp", "schema"]
                .iter()
                .any(|f| code.contains(&format!("feature = \"{f}\"")));
            let next = lines.get(n + 1).map_or("", |l| l.trim());
            let allowed = code
                == r#"#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]"#
                || (code == r#"#[cfg(feature = "schema")]"#
                    && next.starts_with("impl schemars::JsonSchema for "))
                || (code == r#"#[cfg(feature = "cli")]"# && next.starts_with("pub(crate) mod "));
            if gated && !allowed {
                offenders.push(format!("{rel}:{}: {code}", n + 1));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "a surface feature gates code in the core (move it to the surface, or run the tests \
         without default features again in .ci/run): {offenders:#?}"
    );
}

/// Architecture Invariant: `unsafe` appears only where a crate's API forces it (the journal's
/// mappings of segments and snapshots; the spawn actions and the reactor registration nix and
/// tokio offer only as unsafe; the `clone3` forks that nix and rustix do not wrap; the zygote's
/// received descriptors; the small guardian's allocator, which `GlobalAlloc` makes unsafe;
/// glibc's `malloc_trim` and `mallopt`, and the guardian's `_exit`, foreign functions; the
/// read-only mappings of spill files),
/// and every block says why it is sound in a `// SAFETY:` comment just above it.
#[test]
fn unsafe_code_is_confined_and_justified() {
    let allowed = [
        "src/journal/mmap.rs",
        "src/tree/spawn.rs",
        "src/tree/group.rs",
        "src/tree/cgroup.rs",
        "src/tree/guardian/run.rs",
        "src/tree/guardian/zygote.rs",
        "src/tree/guardian/arena.rs",
        "src/heap.rs",
        "src/spill.rs",
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

/// The crate's import graph, read from the sources: which module names which (`crate::` and
/// `super::` paths, `use` lists expanded), at two grains. Files are nodes: `src/a/b.rs` is
/// `a/b`, `src/a/mod.rs` is `a`; at the top level every file of `src/a/` is `a`. A module
/// naming its own ancestor (`super::Shared`) is no edge: a parent declares its children and
/// re-exports them, which is not a dependency of the kind the layering is about. Left out:
/// comment lines, code under `#[cfg(test)]` (test modules and files, test-only items), and
/// `src/fuzzing.rs` (only the registry of the fuzz targets: it re-exports the bodies each layer
/// keeps in its own `fuzz.rs`, which are checked like any file, and nothing imports it). A path through a re-export of `src/lib.rs`
/// (`crate::run_guardian_if_requested` for `crate::tree::guardian::run_if_requested`) counts as
/// the module it names.
mod imports {
    use std::collections::{BTreeMap, BTreeSet};

    /// Each edge with every place that makes it (file, line), sorted.
    pub type Edges = BTreeMap<String, BTreeMap<String, BTreeSet<(String, usize)>>>;

    pub struct Graph {
        pub top: Edges,
        pub file: Edges,
    }

    /// `src/a/b.rs` -> `[a, b]`, `src/a/mod.rs` -> `[a]`, `src/lib.rs` -> `[]`; `None` for the
    /// binary and anything else that is no module of the library.
    fn module_path(rel: &str) -> Option<Vec<String>> {
        let p = rel.strip_prefix("src/")?.strip_suffix(".rs")?;
        if p.starts_with("bin/") {
            return None;
        }
        let mut parts: Vec<String> = p.split('/').map(str::to_owned).collect();
        if p == "lib" || parts.last().is_some_and(|l| l == "mod") {
            parts.pop();
        }
        Some(parts)
    }

    fn indent(line: &str) -> usize {
        line.len() - line.trim_start().len()
    }

    /// The index of the last line of the item starting at `lines[at]`: the line itself when it
    /// ends the item (`;`, `,` or a block closed on it), the end of a `use` list, or the `}` at
    /// the item's indentation. The line itself when no end is found, so that a misread never
    /// blanks the rest of a file.
    fn item_end(lines: &[&str], at: usize) -> usize {
        let Some(first) = lines.get(at) else {
            return at;
        };
        if first.trim_end().ends_with([';', ',', '}']) {
            return at;
        }
        let is_use = first.split_whitespace().any(|w| w == "use");
        let column = indent(first);
        (at + 1..lines.len())
            .find(|&k| {
                let l = lines[k];
                if is_use {
                    l.trim_end().ends_with(';')
                } else {
                    indent(l) == column && l.trim_start().starts_with('}')
                }
            })
            .unwrap_or(at)
    }

    /// The code of `text` line by line, comment lines and everything under `#[cfg(test)]`
    /// blanked (line numbers stay), and the names of the test-only child modules it declares
    /// (`#[cfg(test)] mod tests;`).
    fn code_lines(text: &str) -> (Vec<String>, Vec<String>) {
        const TEST_ONLY: &str = "#[cfg(test)]";
        let lines: Vec<&str> = text.lines().collect();
        let mut code = vec![String::new(); lines.len()];
        let mut test_children = Vec::new();
        let mut i = 0;
        while i < lines.len() {
            let t = lines[i].trim();
            if let Some(rest) = t.strip_prefix(TEST_ONLY) {
                // The item it gates: on this line, or the first after attributes and docs.
                let mut item = i;
                if rest.trim().is_empty() {
                    item += 1;
                    while lines.get(item).is_some_and(|l| {
                        l.trim_start().starts_with("#[") || l.trim_start().starts_with("//")
                    }) {
                        item += 1;
                    }
                }
                if let Some(l) = lines.get(item) {
                    let l = l.trim().trim_start_matches(TEST_ONLY);
                    let words: Vec<&str> = l.split_whitespace().collect();
                    if let Some(at) = words.iter().position(|w| *w == "mod")
                        && let Some(name) = words.get(at + 1).and_then(|n| n.strip_suffix(';'))
                    {
                        test_children.push(name.to_owned());
                    }
                }
                i = item_end(&lines, item).max(i) + 1;
                continue;
            }
            if !t.starts_with("//") {
                code[i] = lines[i].to_owned();
            }
            i += 1;
        }
        (code, test_children)
    }

    /// One path of a `use` tree, or a path in code: its segments, and its `as` name.
    #[derive(Debug, PartialEq)]
    pub struct UsePath {
        pub segments: Vec<String>,
        pub rename: Option<String>,
    }

    /// A cursor over source bytes (identifiers are ASCII; anything else only ends them).
    struct Cursor<'a> {
        s: &'a [u8],
        i: usize,
    }

    fn is_ident(b: u8) -> bool {
        b.is_ascii_alphanumeric() || b == b'_'
    }

    impl Cursor<'_> {
        fn peek(&mut self) -> Option<u8> {
            while self.s.get(self.i).is_some_and(|b| b.is_ascii_whitespace()) {
                self.i += 1;
            }
            self.s.get(self.i).copied()
        }

        fn ident(&mut self) -> Option<String> {
            self.peek();
            let start = self.i;
            while self.s.get(self.i).copied().is_some_and(is_ident) {
                self.i += 1;
            }
            (self.i > start).then(|| String::from_utf8_lossy(&self.s[start..self.i]).into_owned())
        }

        fn eat(&mut self, token: &[u8]) -> bool {
            self.peek();
            let found = self.s[self.i..].starts_with(token);
            if found {
                self.i += token.len();
            }
            found
        }

        /// A use tree (a path in code is one without braces): `a::b`, `a::{b, c::{d, self}}`,
        /// `a::*`, `a::b as c`, expanded into its paths.
        fn tree(&mut self) -> Vec<UsePath> {
            let mut prefix = Vec::new();
            loop {
                if self.eat(b"{") {
                    let mut out = Vec::new();
                    while !self.eat(b"}") {
                        let before = self.i;
                        for mut sub in self.tree() {
                            if sub.segments.first().is_some_and(|s| s == "self") {
                                sub.segments.remove(0);
                            }
                            let mut segments = prefix.clone();
                            segments.append(&mut sub.segments);
                            out.push(UsePath {
                                segments,
                                rename: sub.rename,
                            });
                        }
                        let separated = self.eat(b",");
                        if self.i == before || !separated && self.peek() != Some(b'}') {
                            break;
                        }
                    }
                    return out;
                }
                if self.eat(b"*") {
                    break;
                }
                match self.ident() {
                    Some(segment) => prefix.push(segment),
                    None => break,
                }
                if !self.eat(b"::") {
                    break;
                }
            }
            let save = self.i;
            let rename = match self.ident().as_deref() {
                Some("as") => self.ident(),
                _ => {
                    self.i = save;
                    None
                }
            };
            vec![UsePath {
                segments: prefix,
                rename,
            }]
        }
    }

    /// Every `crate::`, `$crate::` and `super::` path of `code` (lines), with its line number.
    pub fn paths(code: &[String]) -> Vec<(usize, UsePath)> {
        let text = code.join("\n");
        let s = text.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < s.len() {
            let starts = [&b"crate::"[..], b"super::"]
                .iter()
                .any(|k| s[i..].starts_with(k))
                && (i == 0 || !(is_ident(s[i - 1]) || s[i - 1] == b':'));
            if !starts {
                i += 1;
                continue;
            }
            let line = 1 + s[..i].iter().filter(|&&b| b == b'\n').count();
            let mut cursor = Cursor { s, i };
            for path in cursor.tree() {
                out.push((line, path));
            }
            i = cursor.i.max(i + 1);
        }
        out
    }

    /// The module a path names: the longest prefix of it that is a module file, through
    /// `src/lib.rs`'s re-exports for a first name that is no module of the crate root.
    fn resolve(
        from: &[String],
        segments: &[String],
        modules: &BTreeSet<Vec<String>>,
        aliases: &BTreeMap<String, Vec<String>>,
    ) -> Option<Vec<String>> {
        let (first, rest) = segments.split_first()?;
        let mut abs: Vec<String> = match first.as_str() {
            "crate" => rest.to_vec(),
            "super" => {
                let mut base = from[..from.len().saturating_sub(1)].to_vec();
                let mut rest = rest;
                while let Some((s, r)) = rest.split_first()
                    && s == "super"
                {
                    base.pop();
                    rest = r;
                }
                base.extend_from_slice(rest);
                base
            }
            _ => return None,
        };
        if let Some(target) = abs.first().and_then(|name| aliases.get(name))
            && !modules.contains(&abs[..1].to_vec())
        {
            abs.splice(..1, target.iter().cloned());
        }
        (1..=abs.len())
            .rev()
            .map(|n| abs[..n].to_vec())
            .find(|m| modules.contains(m))
    }

    /// The graph of `files` ((path from the crate root, text): every `.rs` of `src/`).
    pub fn graph(files: &[(String, String)]) -> Graph {
        let mut parsed = Vec::new();
        let mut test_only = BTreeSet::new();
        for (rel, text) in files {
            let Some(module) = module_path(rel) else {
                continue;
            };
            let (code, test_children) = code_lines(text);
            for child in test_children {
                let mut m = module.clone();
                m.push(child);
                test_only.insert(m);
            }
            parsed.push((rel.clone(), module, code));
        }
        let modules: BTreeSet<Vec<String>> = parsed.iter().map(|(_, m, _)| m.clone()).collect();
        let mut aliases = BTreeMap::new();
        for (_, _, code) in parsed.iter().filter(|(rel, _, _)| rel == "src/lib.rs") {
            for line in code {
                if let Some(tree) = line.trim().strip_prefix("pub use ") {
                    let mut cursor = Cursor {
                        s: tree.as_bytes(),
                        i: 0,
                    };
                    for path in cursor.tree() {
                        if let Some(name) = path.rename.or_else(|| path.segments.last().cloned()) {
                            aliases.insert(name, path.segments);
                        }
                    }
                }
            }
        }
        let mut graph = Graph {
            top: Edges::new(),
            file: Edges::new(),
        };
        for (rel, module, code) in &parsed {
            let excluded = rel == "src/fuzzing.rs"
                || module.is_empty()
                || (1..=module.len()).any(|n| test_only.contains(&module[..n]));
            if excluded {
                continue;
            }
            let from = module.join("/");
            for (line, path) in paths(code) {
                let Some(to) = resolve(module, &path.segments, &modules, &aliases) else {
                    continue;
                };
                if to.is_empty() {
                    continue;
                }
                let place = (rel.clone(), line);
                if to[0] != module[0] {
                    let edge = graph.top.entry(module[0].clone()).or_default();
                    edge.entry(to[0].clone()).or_default().insert(place.clone());
                }
                let to = to.join("/");
                if to != from && !from.starts_with(&format!("{to}/")) {
                    let edge = graph.file.entry(from.clone()).or_default();
                    edge.entry(to).or_default().insert(place);
                }
            }
        }
        graph
    }

    /// The strongly connected components of `edges` with more than one node (each holds a
    /// cycle), by Tarjan's algorithm.
    pub fn cycles(edges: &Edges) -> Vec<BTreeSet<String>> {
        struct Tarjan<'a> {
            edges: &'a Edges,
            index: BTreeMap<&'a str, usize>,
            low: BTreeMap<&'a str, usize>,
            stack: Vec<&'a str>,
            out: Vec<BTreeSet<String>>,
        }
        impl<'a> Tarjan<'a> {
            fn visit(&mut self, v: &'a str) {
                let n = self.index.len();
                self.index.insert(v, n);
                self.low.insert(v, n);
                self.stack.push(v);
                for w in self.edges.get(v).into_iter().flat_map(|m| m.keys()) {
                    let w = w.as_str();
                    let low = if !self.index.contains_key(w) {
                        self.visit(w);
                        self.low[w]
                    } else if self.stack.contains(&w) {
                        self.index[w]
                    } else {
                        continue;
                    };
                    let low = self.low[v].min(low);
                    self.low.insert(v, low);
                }
                if self.low[v] == self.index[v] {
                    let mut component = BTreeSet::new();
                    while let Some(w) = self.stack.pop() {
                        component.insert(w.to_owned());
                        if w == v {
                            break;
                        }
                    }
                    if component.len() > 1 {
                        self.out.push(component);
                    }
                }
            }
        }
        let mut t = Tarjan {
            edges,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: Vec::new(),
            out: Vec::new(),
        };
        for v in edges.keys() {
            if !t.index.contains_key(v.as_str()) {
                t.visit(v);
            }
        }
        t.out
    }

    /// A shortest cycle within `component` (a strongly connected component of `edges`), as its
    /// nodes in order (the first is not repeated at the end).
    pub fn shortest_cycle(edges: &Edges, component: &BTreeSet<String>) -> Vec<String> {
        let mut best: Option<Vec<String>> = None;
        for start in component {
            // Breadth first from `start` back to it, through the component only.
            let mut parent: BTreeMap<&str, &str> = BTreeMap::new();
            let mut queue = std::collections::VecDeque::from([start.as_str()]);
            let mut closing = None;
            while let Some(v) = queue.pop_front() {
                for w in edges.get(v).into_iter().flat_map(|m| m.keys()) {
                    if w == start {
                        closing = Some(v);
                        break;
                    }
                    if component.contains(w) && !parent.contains_key(w.as_str()) {
                        parent.insert(w, v);
                        queue.push_back(w);
                    }
                }
                if closing.is_some() {
                    break;
                }
            }
            let Some(mut v) = closing else {
                continue;
            };
            let mut cycle = vec![v.to_owned()];
            while v != start {
                v = parent[v];
                cycle.push(v.to_owned());
            }
            cycle.reverse();
            if best.as_ref().is_none_or(|b| cycle.len() < b.len()) {
                best = Some(cycle);
            }
        }
        best.unwrap_or_default()
    }

    /// `a -> b (src/a.rs:3, src/a.rs:9)`, at most four places.
    pub fn describe(from: &str, to: &str, places: &BTreeSet<(String, usize)>) -> String {
        let mut at: Vec<String> = places
            .iter()
            .take(4)
            .map(|(file, line)| format!("{file}:{line}"))
            .collect();
        if places.len() > 4 {
            at.push(format!("{} more", places.len() - 4));
        }
        format!("{from} -> {to} ({})", at.join(", "))
    }
}

/// The layers of the crate from the top, each a set of top-level modules (ARCHITECTURE.md,
/// "Layers"). A module may import from a lower layer, and from another module of its own
/// layer (cycles are checked apart).
const LAYERS: &[&[&str]] = &[
    // The surfaces.
    &["cli", "mcp", "server", "client"],
    // Shipping the journal to NATS, and reading what the fleet's server holds.
    &["fleet"],
    &["protocol"],
    &["supervisor"],
    // What the supervisor drives beside the lifecycle: the OS boundary of process trees, the
    // admission policy, the launch environment.
    &["tree", "admission", "environment"],
    &["lifecycle"],
    &["spool"],
    &["journal"],
];

/// Leaves: imported from any layer, importing only each other.
const LEAVES: &[&str] = &[
    "limits", "codec", "idhash", "idsort", "root", "event_id", "sync", "heap", "spill", "runs",
    "aligned",
];

/// What is wrong with the import graph of `files`: every cycle (top-level and file-level),
/// every top-level edge against the layers, and every command module of the CLI that imports
/// another; each edge with the places that make it.
fn import_violations(files: &[(String, String)]) -> Vec<String> {
    let graph = imports::graph(files);
    let mut out = Vec::new();
    for (grain, edges) in [("top-level", &graph.top), ("file-level", &graph.file)] {
        for component in imports::cycles(edges) {
            // One cycle of the tangle, the shortest: breaking it may leave others.
            let cycle = imports::shortest_cycle(edges, &component);
            let mut lines = vec![format!(
                "a {grain} import cycle ({} modules tangled in all): {} -> {}",
                component.len(),
                cycle.join(" -> "),
                cycle[0]
            )];
            for (i, from) in cycle.iter().enumerate() {
                let to = &cycle[(i + 1) % cycle.len()];
                lines.push(format!(
                    "  {}",
                    imports::describe(from, to, &edges[from][to])
                ));
            }
            out.push(lines.join("\n"));
        }
    }
    let rank = |m: &str| LAYERS.iter().position(|layer| layer.contains(&m));
    for (from, tos) in &graph.top {
        for (to, places) in tos {
            let wrong = match (
                LEAVES.contains(&from.as_str()),
                LEAVES.contains(&to.as_str()),
            ) {
                (_, true) => None,
                (true, false) => Some("a leaf imports a layer"),
                (false, false) => match (rank(from), rank(to)) {
                    (Some(a), Some(b)) if a <= b => None,
                    (Some(_), Some(_)) => Some("an import against the layers"),
                    _ => Some("a module with no place in the layers (LAYERS or LEAVES)"),
                },
            };
            if let Some(why) = wrong {
                out.push(format!("{why}: {}", imports::describe(from, to, places)));
            }
        }
    }
    let is_command = |m: &str| m.starts_with("cli/") && m.ends_with("_cmd");
    for (from, tos) in graph.file.iter().filter(|(from, _)| is_command(from)) {
        for (to, places) in tos.iter().filter(|(to, _)| is_command(to)) {
            out.push(format!(
                "a CLI command imports another (move what they share into a leaf module of \
                 src/cli): {}",
                imports::describe(from, to, places)
            ));
        }
    }
    out
}

/// Architecture Invariant: imports flow one way, surfaces -> protocol -> supervisor ->
/// {tree, admission, environment} -> lifecycle -> spool -> journal, with the leaves (limits,
/// codec, idhash, root, event_id) below them all; no module imports itself back through
/// others; no CLI command imports another.
#[test]
fn imports_flow_one_way() {
    let violations = import_violations(&sources(""));
    assert!(
        violations.is_empty(),
        "{}\n\nMove what both sides use down into the lower module, or into a small leaf module \
         of its own; a new top-level module gets its place in LAYERS or LEAVES here and in \
         ARCHITECTURE.md ('Layers').",
        violations.join("\n")
    );
}

/// The sources with `line` appended to `file`, and the number it gets there.
fn with_line(file: &str, line: &str) -> (Vec<(String, String)>, usize) {
    let mut files = sources("");
    let (_, text) = files
        .iter_mut()
        .find(|(rel, _)| rel == file)
        .expect("a source file");
    text.push('\n');
    text.push_str(line);
    let number = text.lines().count();
    (files, number)
}

/// The check itself: each kind of bad import is found, at the place it was made; an import
/// inside a test module is not one.
#[test]
fn the_import_check_finds_each_kind_of_bad_import() {
    assert_eq!(import_violations(&sources("")), Vec::<String>::new());
    let found = |file: &str, line: &str, expected: &str| {
        let (files, number) = with_line(file, line);
        let violations = import_violations(&files).join("\n");
        let expected = expected.replace("{n}", &number.to_string());
        assert!(
            violations.contains(&expected),
            "{line} in {file}: expected {expected:?} in\n{violations}"
        );
    };
    // Against the layers, and through a `use` list.
    found(
        "src/journal/format.rs",
        "use crate::{limits, supervisor::Supervisor};",
        "an import against the layers: journal -> supervisor (src/journal/format.rs:{n})",
    );
    // A leaf importing a layer, through a path in code.
    found(
        "src/limits.rs",
        "fn _options(_: crate::spool::SpoolOptions) {}",
        "a leaf imports a layer: limits -> spool (src/limits.rs:{n})",
    );
    // A cycle inside one layer: the floor is what the reader reads.
    found(
        "src/journal/floor.rs",
        "use super::reader::JournalReader;",
        "  journal/floor -> journal/reader (src/journal/floor.rs:{n})",
    );
    // Through a re-export of the crate root: `crate::run_guardian_if_requested` is the tree's,
    // which the supervisor may import, and the journal may not.
    let (files, _) = with_line(
        "src/supervisor/capture.rs",
        "use crate::run_guardian_if_requested as _;",
    );
    assert_eq!(import_violations(&files), Vec::<String>::new());
    found(
        "src/journal/reader.rs",
        "use crate::{self as c, run_guardian_if_requested};",
        "an import against the layers: journal -> tree (src/journal/reader.rs:{n})",
    );
    // A CLI command importing another.
    found(
        "src/cli/logs_cmd.rs",
        "use super::ps_cmd::PsArgs;",
        "a CLI command imports another (move what they share into a leaf module of src/cli): \
         cli/logs_cmd -> cli/ps_cmd (src/cli/logs_cmd.rs:{n})",
    );
    // A test may import anything.
    let (files, _) = with_line(
        "src/journal/format.rs",
        "#[cfg(test)]\nmod more_tests {\n    use crate::cli::exit;\n}",
    );
    assert_eq!(import_violations(&files), Vec::<String>::new());
}

/// `use` lists expand to one path each, `self` and renames included.
#[test]
fn use_lists_expand_to_their_paths() {
    let code = ["use super::{a::{b, self}, c as d, e::*};".to_owned()];
    let paths: Vec<(usize, Vec<String>, Option<String>)> = imports::paths(&code)
        .into_iter()
        .map(|(line, p)| (line, p.segments, p.rename))
        .collect();
    let path = |s: &str| s.split("::").map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(
        paths,
        vec![
            (1, path("super::a::b"), None),
            (1, path("super::a"), None),
            (1, path("super::c"), Some("d".to_owned())),
            (1, path("super::e"), None),
        ]
    );
}

/// Whether `comment` cites a tracker or requirements document by number (the word issue or
/// seed, then a number, maybe after `#`): numbers that name nothing inside the repository.
fn cites_a_number(comment: &str) -> bool {
    let lower = comment.to_lowercase();
    ["issue", "seed"].iter().any(|word| {
        lower.match_indices(word).any(|(at, _)| {
            let before = lower[..at].chars().next_back();
            let after = lower[at + word.len()..].trim_start_matches('s');
            let after = after.strip_prefix(' ').unwrap_or(after);
            let after = after.strip_prefix('#').unwrap_or(after);
            before.is_none_or(|c| !c.is_alphanumeric())
                && after.chars().next().is_some_and(|c| c.is_ascii_digit())
        })
    })
}

/// The comments of every file the repository keeps code in, as (path, line number, comment):
/// what follows `//` in Rust, the whole line elsewhere (the Python client's docstrings).
fn comments() -> Vec<(String, usize, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["src", "tests", "benches", "examples", "fuzz/fuzz_targets"] {
        if root.join(dir).is_dir() {
            rust_files(&root.join(dir), &mut files);
        }
    }
    files.push(root.join("tests/mcp/session_test.py"));
    let mut out = Vec::new();
    for file in files {
        let (rel, text) = read_relative(root, &file);
        let rust = file.extension().is_some_and(|e| e == "rs");
        for (n, line) in text.lines().enumerate() {
            let comment = if rust {
                line.split_once("//").map_or("", |(_, c)| c)
            } else {
                line
            };
            out.push((rel.clone(), n + 1, comment.to_owned()));
        }
    }
    out
}

/// Comments say why in words: an issue or a requirements document cited by its number means
/// nothing to a reader of the repository (the commit that made a change says which issue).
#[test]
fn comments_cite_no_issue_or_seed_numbers() {
    let found: Vec<String> = comments()
        .into_iter()
        .filter(|(_, _, c)| cites_a_number(c))
        .map(|(file, n, c)| format!("{file}:{n}: {}", c.trim()))
        .collect();
    assert!(
        found.is_empty(),
        "say what the cited text asks for instead of its number:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_citation_check_finds_numbers_and_nothing_else() {
    for cited in [
        "(issue 14)",
        "Issue #3: x",
        "seed 003's 2 GiB",
        "issues 12 and 13",
    ] {
        assert!(cites_a_number(cited), "{cited}");
    }
    for plain in [
        "an issue of 14 bytes",
        "reissue 4",
        "the seed of the rng",
        "seeds",
    ] {
        assert!(!cites_a_number(plain), "{plain}");
    }
}

/// Functions of `src/` allowed to be longer than 70 lines (from their `fn` line to their closing
/// brace, test code aside), each with its length: none now. The ratchet stays so that a
/// function that must exceed the limit for a while is listed where review sees it, and cannot
/// grow or stay listed once split; the parent keeps the state, helpers compute what changes.
const LONG_FUNCTIONS: &[(&str, &str, usize)] = &[];

const FUNCTION_LINES_MAX: usize = 70;

/// Every function of `src/` outside test code: (file, name, lines from `fn` to its closing
/// brace). rustfmt's layout is relied on: a body ends at the first `}` at the `fn` line's
/// indentation, and an inline test module starts with a top-level `#[cfg(test)]`.
fn function_lengths() -> Vec<(String, String, usize)> {
    let mut out = Vec::new();
    for (rel, text) in sources("") {
        let name = rel.rsplit('/').next().unwrap_or("");
        if name.starts_with("tests") || rel.contains("/tests/") {
            continue;
        }
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let next = lines.get(i + 1).map_or("", |l| l.trim_start());
            if *line == "#[cfg(test)]" && next.starts_with("mod ") && next.ends_with('{') {
                break;
            }
            let Some((indent, name)) = fn_name(line) else {
                continue;
            };
            let Some(open) = (i..lines.len()).find(|&j| lines[j].trim_end().ends_with('{')) else {
                continue;
            };
            if (i..open).any(|j| lines[j].trim_end().ends_with(';')) {
                continue; // a declaration without a body
            }
            let close = format!("{indent}}}");
            let end = (open + 1..lines.len())
                .find(|&k| lines[k] == close)
                .unwrap_or(lines.len() - 1);
            out.push((rel.clone(), name, end - i + 1));
        }
    }
    out
}

/// The indentation and name of a line that starts a function (`pub(crate) async fn name`).
fn fn_name(line: &str) -> Option<(&str, String)> {
    let rest = line.trim_start();
    let indent = &line[..line.len() - rest.len()];
    let mut rest = rest;
    for prefix in [
        "pub(crate) ",
        "pub(super) ",
        "pub ",
        "const ",
        "async ",
        "unsafe ",
    ] {
        rest = rest.strip_prefix(prefix).unwrap_or(rest);
    }
    let name: String = rest
        .strip_prefix("fn ")?
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some((indent, name))
}

/// Functions stay short (TigerBeetle's limit of 70 lines): no new one over the limit, no
/// listed one longer than it was, and none listed that is now within it.
#[test]
fn functions_stay_within_seventy_lines_or_shrink() {
    let mut problems = Vec::new();
    let found = function_lengths();
    for (file, name, lines) in &found {
        let listed = LONG_FUNCTIONS
            .iter()
            .find(|(f, n, _)| f == file && n == name);
        match listed {
            None if *lines > FUNCTION_LINES_MAX => problems.push(format!(
                "{file}: fn {name} has {lines} lines (at most {FUNCTION_LINES_MAX}): split it"
            )),
            Some((_, _, was)) if lines > was => problems.push(format!(
                "{file}: fn {name} grew from {was} to {lines} lines: split it instead"
            )),
            Some(_) if *lines <= FUNCTION_LINES_MAX => problems.push(format!(
                "{file}: fn {name} is {lines} lines now: take it off LONG_FUNCTIONS"
            )),
            // The entry follows it down, so that a split cannot grow back unseen.
            Some((_, _, was)) if lines < was => problems.push(format!(
                "{file}: fn {name} shrank from {was} to {lines} lines: lower its entry"
            )),
            _ => {}
        }
    }
    for (file, name, _) in LONG_FUNCTIONS {
        if !found.iter().any(|(f, n, _)| f == file && n == name) {
            problems.push(format!(
                "{file}: fn {name} is gone: take it off LONG_FUNCTIONS"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn function_lengths_are_measured_from_fn_to_its_brace() {
    assert_eq!(
        fn_name("    pub(crate) async fn open_inner("),
        Some(("    ", "open_inner".to_owned()))
    );
    assert_eq!(fn_name("let f = |x| x;"), None);
    assert_eq!(fn_name("// fn commented"), None);
    let measured = function_lengths();
    let length = |file: &str, name: &str| {
        measured
            .iter()
            .find(|(f, n, _)| f == file && n == name)
            .map(|(_, _, l)| *l)
    };
    // Five lines, from its `fn` line to its closing brace.
    assert_eq!(length("src/root/dir.rs", "file_name"), Some(5));
    // To its own closing brace, past those of the blocks nested in it.
    assert_eq!(length("src/journal/fuzz/plan.rs", "build_body"), Some(44));
}

/// The modules of the crate an embedder may name: the rest are private (public only under
/// `test-support`, for the crate's own tests), their surface re-exported at the crate root.
const PUBLIC_MODULES: &[&str] = &["codec", "limits", "fuzzing", "idhash"];

/// The paths `procjournal::<module>::` that `text` names through a module that is not public.
fn private_paths(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (at, _) in text.match_indices("procjournal::") {
        let rest = &text[at + "procjournal::".len()..];
        let module: String = rest
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '_')
            .collect();
        let is_module = !module.is_empty() && rest[module.len()..].starts_with("::");
        if is_module && !PUBLIC_MODULES.contains(&module.as_str()) {
            out.push(format!("procjournal::{module}::"));
        }
    }
    out
}

/// Architecture Invariant: a chosen public surface. What a newcomer copies (README.md, docs/,
/// examples/, the library's own doc comments) names only what an embedder can: the crate root's
/// re-exports and the public modules. The tests build the library with `test-support`, under
/// which every layer is public, so a doctest or an example that reached into a layer would still
/// compile here and fail for every user.
#[test]
fn what_users_copy_names_only_the_public_surface() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut texts: Vec<(String, String)> = Vec::new();
    for dir in ["docs", "examples"] {
        let mut names: Vec<PathBuf> = std::fs::read_dir(root.join(dir))
            .expect("read dir")
            .map(|e| e.expect("dir entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "md" || e == "rs"))
            .collect();
        names.sort();
        texts.extend(names.iter().map(|p| read_relative(root, p)));
    }
    texts.push(read_relative(root, &root.join("README.md")));
    for (rel, text) in sources("") {
        let docs: Vec<&str> = text
            .lines()
            .filter(|l| {
                let l = l.trim_start();
                l.starts_with("///") || l.starts_with("//!")
            })
            .collect();
        texts.push((rel, docs.join("\n")));
    }
    let mut problems = Vec::new();
    for (rel, text) in &texts {
        for path in private_paths(text) {
            problems.push(format!(
                "{rel}: names {path}, a private module: use the crate root's re-export"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_surface_check_finds_paths_through_private_modules() {
    assert_eq!(
        private_paths("use procjournal::supervisor::{Command, Supervisor};"),
        vec!["procjournal::supervisor::".to_owned()]
    );
    assert!(private_paths("use procjournal::{Command, Supervisor};").is_empty());
    assert!(private_paths("use procjournal::codec::{self, CODEC_VERSION};").is_empty());
    // A tracing target, not a path.
    assert!(private_paths("an event on the `procjournal::admission` target").is_empty());
}
