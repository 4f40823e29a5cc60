//! The launch environment of a workload, and what the journal keeps of it
//! (host shell environment, PATH-like overlay, Git redirection removal).
//!
//! A workload's environment is built in four steps, in this order:
//! 1. the **base**: the supervisor's own environment (inherited), one the embedding host gave
//!    (explicit), or the environment of the client that asked (`procjournal start` sends its own,
//!    so a command runs as the shell that started it would have run it);
//! 2. the **overlay**, when asked for: the PATH-like variables of [`OVERLAY_NAMES`] as a login
//!    shell sets them (captured once per supervisor, `tree::login_shell`), so that toolchains an
//!    interactive shell puts on PATH are found; a capture that failed leaves the base unchanged;
//! 3. **Git redirection removed** ([`is_git_redirection`]): a variable that points git at another
//!    repository, work tree, index, object store or configuration, inherited from whatever ran
//!    the supervisor (a git hook, `git rebase -x`), would make every git command of the workload
//!    act on that repository instead of the one in its working directory;
//! 4. the caller's **overrides**, last, so that a deliberate override (an isolated temporary
//!    `GIT_INDEX_FILE`) stands.
//!
//! Invariants: pure (no I/O: the base and the capture are given to it); the [`EnvPolicy`] it
//! returns holds names only, never a value; the journal keeps an override's value only when the
//! caller marked it persistable ([`EnvOverride::persist`]), so a value a restart needs and the
//! journal does not hold is named by [`for_restart`]'s error.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};

use crate::lifecycle::Manifest;
use crate::lifecycle::event::EnvVar;
use crate::lifecycle::event::{EnvBase, EnvOverlay, EnvPolicy};

/// Git's repository-local variables, as `git rev-parse --local-env-vars` lists them (git 2.47:
/// the variables git itself unsets before it works in another repository), and `GIT_NAMESPACE`
/// and `GIT_QUARANTINE_PATH` (which point refs and new objects elsewhere). Every variable whose
/// name starts with `GIT_CONFIG` is removed as well ([`is_git_redirection`]): `GIT_CONFIG`,
/// `GIT_CONFIG_GLOBAL`, `GIT_CONFIG_SYSTEM`, `GIT_CONFIG_NOSYSTEM`, `GIT_CONFIG_PARAMETERS`,
/// `GIT_CONFIG_COUNT` and its `GIT_CONFIG_KEY_n` / `GIT_CONFIG_VALUE_n` pairs redirect or inject
/// configuration. Variables that only tune behaviour (`GIT_EDITOR`, `GIT_SSH_COMMAND`,
/// `GIT_TERMINAL_PROMPT`, `GIT_CEILING_DIRECTORIES`) are kept.
pub const GIT_REDIRECTION: &[&str] = &[
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_DIR",
    "GIT_GRAFT_FILE",
    "GIT_IMPLICIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_NAMESPACE",
    "GIT_NO_REPLACE_OBJECTS",
    "GIT_OBJECT_DIRECTORY",
    "GIT_PREFIX",
    "GIT_QUARANTINE_PATH",
    "GIT_REPLACE_REF_BASE",
    "GIT_SHALLOW_FILE",
    "GIT_WORK_TREE",
];

/// Whether the policy removes `name` from the base (step 3 of the module doc).
pub fn is_git_redirection(name: &OsStr) -> bool {
    let bytes = name.as_encoded_bytes();
    bytes.starts_with(b"GIT_CONFIG") || GIT_REDIRECTION.iter().any(|g| g.as_bytes() == bytes)
}

/// The variables the login-shell overlay may set (PATH, PATHEXT and the .NET
/// discovery roots): where toolchains are found, never credentials.
pub const OVERLAY_NAMES: &[&str] = &[
    "PATH",
    "PATHEXT",
    "DOTNET_ROOT",
    "DOTNET_ROOT_X64",
    "DOTNET_ROOT_X86",
];

/// One override of a command, with its value; `persist` says whether the journal may keep the
/// value (by default it keeps the name only: values hold API tokens in practice).
#[derive(Clone, PartialEq, Eq)]
pub struct EnvOverride {
    pub name: String,
    pub value: String,
    pub persist: bool,
}

/// The value is never shown: a `Debug` of a command must not leak it into a log.
impl std::fmt::Debug for EnvOverride {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnvOverride")
            .field("name", &self.name)
            .field("persist", &self.persist)
            .finish_non_exhaustive()
    }
}

impl EnvOverride {
    /// As the journal records it: the value only when persistable.
    pub fn recorded(&self) -> EnvVar {
        EnvVar {
            name: self.name.clone(),
            value: self.persist.then(|| self.value.clone()),
        }
    }
}

/// Where the environment starts (step 1).
#[derive(Clone, Default, PartialEq, Eq)]
pub enum Base {
    /// The supervisor's own environment.
    #[default]
    Inherited,
    /// Exactly these variables (the embedding host's choice).
    Explicit(Vec<(OsString, OsString)>),
    /// The client's environment, as it sent it.
    Client(Vec<(OsString, OsString)>),
}

/// Values never shown (see [`EnvOverride`]'s `Debug`).
impl std::fmt::Debug for Base {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (kind, n) = match self {
            Base::Inherited => ("Inherited", None),
            Base::Explicit(v) => ("Explicit", Some(v.len())),
            Base::Client(v) => ("Client", Some(v.len())),
        };
        match n {
            Some(n) => write!(f, "{kind}({n} variables)"),
            None => f.write_str(kind),
        }
    }
}

impl Base {
    pub fn kind(&self) -> EnvBase {
        match self {
            Base::Inherited => EnvBase::Inherited,
            Base::Explicit(_) => EnvBase::Explicit,
            Base::Client(_) => EnvBase::Client,
        }
    }
}

/// What the overlay step has to work with.
#[derive(Debug, Clone, Copy)]
pub enum Overlay<'a> {
    /// Not asked for.
    Off,
    /// Asked for, with what the login shell set (any names: only [`OVERLAY_NAMES`] are taken).
    Captured(&'a [(String, String)]),
    /// Asked for, but there is no capture: why.
    Failed(&'a str),
}

/// A built environment and the policy that built it.
#[derive(Clone)]
pub struct LaunchEnv {
    pub vars: Vec<(OsString, OsString)>,
    pub policy: EnvPolicy,
}

/// Names only (see [`EnvOverride`]'s `Debug`).
impl std::fmt::Debug for LaunchEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaunchEnv")
            .field(
                "names",
                &self.vars.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("policy", &self.policy)
            .finish()
    }
}

/// Builds the environment (module doc). `inherited` is read only for [`Base::Inherited`].
pub fn build(
    base: &Base,
    inherited: impl FnOnce() -> Vec<(OsString, OsString)>,
    overlay: Overlay<'_>,
    overrides: &[EnvOverride],
) -> LaunchEnv {
    let base_vars = match base {
        Base::Inherited => inherited(),
        Base::Explicit(vars) | Base::Client(vars) => vars.clone(),
    };
    // A later duplicate wins, as a shell's `export` would.
    let mut env: BTreeMap<OsString, OsString> = base_vars.into_iter().collect();
    let overlay = match overlay {
        Overlay::Off => EnvOverlay::Off,
        Overlay::Failed(reason) => EnvOverlay::Failed {
            reason: reason.to_owned(),
        },
        Overlay::Captured(captured) => {
            let mut names = Vec::new();
            for name in OVERLAY_NAMES {
                if let Some((_, v)) = captured.iter().rev().find(|(k, _)| k == name) {
                    env.insert(OsString::from(name), OsString::from(v));
                    names.push((*name).to_owned());
                }
            }
            EnvOverlay::Applied { names }
        }
    };
    let mut removed = Vec::new();
    env.retain(|k, _| {
        let git = is_git_redirection(k);
        if git {
            removed.push(k.to_string_lossy().into_owned());
        }
        !git
    });
    for o in overrides {
        env.insert(OsString::from(&o.name), OsString::from(&o.value));
    }
    LaunchEnv {
        vars: env.into_iter().collect(),
        policy: EnvPolicy {
            base: base.kind(),
            removed,
            overlay,
        },
    }
}

/// Why the overrides of a recorded command cannot be rebuilt.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RestartEnvError {
    /// These variables' values were not persisted and were not supplied, in the order the
    /// command gave them.
    #[error("the values of {} were not persisted; supply them again", .0.join(", "))]
    Missing(Vec<String>),
}

/// The overrides to start `m`'s command again with: each persisted value as recorded, each
/// withheld one from `supplied` (by name). A supplied value for a persisted variable is not
/// used: the journal's record of what ran stands. The base is not part of it (a restart starts
/// from the environment of whoever restarts it; `env_policy.base` says what the first start
/// used). Persistence is kept as recorded, so the restart journals what the first start did.
pub fn for_restart(
    m: &Manifest,
    supplied: &BTreeMap<String, String>,
) -> Result<Vec<EnvOverride>, RestartEnvError> {
    let mut missing = Vec::new();
    let mut out = Vec::with_capacity(m.command.env_overrides().len());
    for (name, value) in m.command.env_overrides() {
        let (value, persist) = match value {
            Some(v) => (v.to_owned(), true),
            None => match supplied.get(name) {
                Some(v) => (v.clone(), false),
                None => {
                    missing.push(name.to_owned());
                    continue;
                }
            },
        };
        out.push(EnvOverride {
            name: name.to_owned(),
            value,
            persist,
        });
    }
    if missing.is_empty() {
        Ok(out)
    } else {
        Err(RestartEnvError::Missing(missing))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    }

    fn ov(name: &str, value: &str, persist: bool) -> EnvOverride {
        EnvOverride {
            name: name.into(),
            value: value.into(),
            persist,
        }
    }

    fn get<'a>(env: &'a LaunchEnv, name: &str) -> Option<&'a OsStr> {
        env.vars
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_os_str())
    }

    #[test]
    fn git_redirection_is_removed_after_the_overlay_and_a_deliberate_override_stands() {
        let base = Base::Client(os(&[
            ("GIT_DIR", "/elsewhere/.git"),
            ("GIT_WORK_TREE", "/elsewhere"),
            ("GIT_CONFIG_COUNT", "1"),
            ("GIT_CONFIG_KEY_0", "core.hooksPath"),
            ("GIT_EDITOR", "vi"),
            ("GITX", "kept"),
            ("HOME", "/home/u"),
        ]));
        let captured = [
            ("PATH".to_owned(), "/opt/tool/bin:/usr/bin".to_owned()),
            ("SECRET".to_owned(), "from-profile".to_owned()),
            ("GIT_INDEX_FILE".to_owned(), "/profile/index".to_owned()),
        ];
        let env = build(
            &base,
            || panic!("a client base never reads the supervisor's environment"),
            Overlay::Captured(&captured),
            &[ov("GIT_INDEX_FILE", "/tmp/isolated", false)],
        );
        assert_eq!(get(&env, "GIT_DIR"), None);
        assert_eq!(get(&env, "GIT_WORK_TREE"), None);
        assert_eq!(get(&env, "GIT_CONFIG_KEY_0"), None);
        assert_eq!(get(&env, "GIT_EDITOR"), Some(OsStr::new("vi")));
        assert_eq!(get(&env, "GITX"), Some(OsStr::new("kept")));
        assert_eq!(
            get(&env, "PATH"),
            Some(OsStr::new("/opt/tool/bin:/usr/bin"))
        );
        // Only the PATH-like names of the capture; a profile's other exports stay out.
        assert_eq!(get(&env, "SECRET"), None);
        assert_eq!(
            get(&env, "GIT_INDEX_FILE"),
            Some(OsStr::new("/tmp/isolated"))
        );
        assert_eq!(env.policy.base, EnvBase::Client);
        assert_eq!(
            env.policy.removed,
            [
                "GIT_CONFIG_COUNT",
                "GIT_CONFIG_KEY_0",
                "GIT_DIR",
                "GIT_WORK_TREE"
            ]
        );
        assert_eq!(
            env.policy.overlay,
            EnvOverlay::Applied {
                names: vec!["PATH".into()]
            }
        );
        // The policy holds names only.
        let text = format!("{:?}", env.policy);
        assert!(!text.contains("/elsewhere") && !text.contains("/opt/tool"));
    }

    #[test]
    fn a_failed_overlay_leaves_the_base_and_says_why() {
        let base = Base::Explicit(os(&[("PATH", "/bin")]));
        let env = build(&base, Vec::new, Overlay::Failed("timed out"), &[]);
        assert_eq!(env.vars, os(&[("PATH", "/bin")]));
        assert_eq!(
            env.policy.overlay,
            EnvOverlay::Failed {
                reason: "timed out".into()
            }
        );
        assert_eq!(env.policy.base, EnvBase::Explicit);
        let inherited = build(&Base::Inherited, || os(&[("A", "1")]), Overlay::Off, &[]);
        assert_eq!(inherited.vars, os(&[("A", "1")]));
        assert_eq!(inherited.policy.overlay, EnvOverlay::Off);
    }

    #[test]
    fn a_restart_gets_persisted_values_and_must_be_given_the_withheld_ones() {
        use crate::journal::EventId;
        use crate::lifecycle::event::{CommandSpecV2, LifecycleIds, RegisteredV2};
        use crate::lifecycle::{Handle, LifecycleEvent, ManifestStore};
        let id = |n: u8| EventId::from_bytes([n; 16]);
        let handle = Handle(id(1));
        let env = build(&Base::Inherited, Vec::new, Overlay::Off, &[]);
        let overrides = [
            ov("TOKEN", "secret-1", false),
            ov("MODE", "fast", true),
            ov("KEY", "secret-2", false),
        ];
        let event = LifecycleEvent::RegisteredV2(RegisteredV2 {
            handle,
            ids: LifecycleIds {
                running: id(2),
                terminal: id(3),
                lost: id(4),
                completion: id(5),
            },
            command: Box::new(CommandSpecV2 {
                program: "sh".into(),
                args: Vec::new(),
                cwd: "/".into(),
                env_overrides: overrides.iter().map(EnvOverride::recorded).collect(),
                labels: BTreeMap::new(),
                limits: Default::default(),
                owner: String::new(),
                env_policy: env.policy,
            }),
            restart_of: None,
            at_unix_ms: 1,
        });
        let mut store = ManifestStore::new();
        store.apply(id(6), &event).unwrap();
        let m = &*store.get(&handle).unwrap();
        assert_eq!(
            for_restart(m, &BTreeMap::new()),
            Err(RestartEnvError::Missing(vec!["TOKEN".into(), "KEY".into()]))
        );
        let partial = BTreeMap::from([("KEY".to_owned(), "again-2".to_owned())]);
        let err = for_restart(m, &partial).unwrap_err();
        assert_eq!(err, RestartEnvError::Missing(vec!["TOKEN".into()]));
        assert!(err.to_string().contains("TOKEN") && !err.to_string().contains("again-2"));
        let supplied = BTreeMap::from([
            ("TOKEN".to_owned(), "again-1".to_owned()),
            ("KEY".to_owned(), "again-2".to_owned()),
            // A persisted value is the journal's, whatever is supplied for it.
            ("MODE".to_owned(), "slow".to_owned()),
        ]);
        assert_eq!(
            for_restart(m, &supplied).unwrap(),
            [
                ov("TOKEN", "again-1", false),
                ov("MODE", "fast", true),
                ov("KEY", "again-2", false)
            ]
        );
    }

    #[test]
    fn a_debug_of_an_override_or_a_base_shows_no_value() {
        let text = format!(
            "{:?} {:?}",
            ov("TOKEN", "marker-123", false),
            Base::Client(os(&[("K", "marker-456")]))
        );
        assert!(!text.contains("marker"), "{text}");
        assert!(text.contains("TOKEN"));
    }
}
