//! The command-line surface. Errors get their context here, at the edge (anyhow); the library
//! below returns typed errors.
//!
//! Recovery tooling (`journal ...`) is offline and read-only: it takes no lock and never writes, so
//! it may run against a root that a live writer holds.

#[macro_use]
mod out;

mod args;
mod capture_cmd;
mod clean_cmd;
mod daemon_cmd;
mod deferred;
mod env_args;
pub(crate) mod env_file;
mod exit;
mod fleet_args;
mod fleet_cmd;
mod foreground;
#[cfg(feature = "fuzzing")]
pub(crate) mod fuzz;
mod journal_cmd;
mod json;
mod launch_args;
mod logs_cmd;
mod mcp_cmd;
mod progress;
mod ps_cmd;
mod queue;
mod run_cmd;
mod run_daemon;
mod size;
mod spool_cmd;
mod target;
mod views;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

use deferred::Deferred;

#[derive(Debug, Parser)]
#[command(
    name = "procjournal",
    version,
    about = "Durable supervision of long-running commands",
    after_help = exit::HELP
)]
pub struct Cli {
    /// Refuse to open a damaged root for writing (run, capture, serve, mcp, and the daemon a
    /// command starts): lost acknowledged records, missing or bad segments, a damaged commit
    /// area, history compacted away... Without it such a root opens with a warning.
    #[arg(long, global = true)]
    strict: bool,
    #[command(subcommand)]
    command: Command,
}

/// `--strict`, set once by [`main`] before any command runs: read by every writer's
/// [`supervisor_config`] and passed on to the daemons this process starts.
static STRICT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn strict() -> bool {
    STRICT.load(std::sync::atomic::Ordering::Relaxed)
}

/// The configuration every writer of the CLI starts from: the library's defaults, with
/// `--strict`.
pub(crate) fn supervisor_config(root: &std::path::Path) -> crate::supervisor::SupervisorConfig {
    let mut config = crate::supervisor::SupervisorConfig::new(root);
    config.strict = strict();
    config
}

/// Opens a supervisor of this process's own on `root` (for `run` and `capture` when no daemon
/// serves it), and says on stderr what its open found. Prepares `launcher` beside the open
/// ([`crate::tree::Launcher::prepare`]: a guardian launcher's zygote), since its caller
/// launches as soon as the root is open.
pub(crate) async fn open_supervisor(
    root: &std::path::Path,
    group: Option<u32>,
    launcher: std::sync::Arc<dyn crate::tree::Launcher>,
) -> anyhow::Result<crate::supervisor::Supervisor> {
    let mut config = supervisor_config(root);
    config.group = group;
    let prepared = std::sync::Arc::clone(&launcher);
    config.launcher = launcher;
    // One command, then exit: nothing to file off the heap for later.
    config.tenure = crate::journal::Tenure::Brief;
    // The launcher's preparation (the guardian zygote's spawn) is polled second: the open has
    // handed its work to blocking threads by then, and this thread, the runtime's only one,
    // would only wait for it. Spawned before the open, the zygote held this thread until its
    // exec, and then until it gave up the CPU it had woken this thread on.
    let (opened, ()) = tokio::join!(
        crate::supervisor::Supervisor::open(config, crate::supervisor::Services::noop()),
        async move { prepared.prepare() },
    );
    let (supervisor, report) =
        opened.with_context(|| format!("cannot open the runtime root {}", root.display()))?;
    warn_damage(root, &report);
    if !report.reconciled.is_empty() {
        note!(
            "procjournal: {} process(es) of an earlier supervisor are now lost_on_restore",
            report.reconciled.len()
        );
    }
    Ok(supervisor)
}

/// Says once, on stderr, what a writer's open found damaged in `root` (the library logs it
/// as a warning, which only the daemon's log shows).
pub(crate) fn warn_damage(root: &std::path::Path, report: &crate::supervisor::RestoreReport) {
    if let Some(damage) = crate::lifecycle::damage::summary(&report.journal, &report.replay) {
        note!(
            "procjournal: warning: {}: {damage}; continuing (--strict refuses such a root)",
            root.display()
        );
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Supervise one command in the foreground: stream its output, forward Ctrl-C, exit with its
    /// status, and keep everything in the journal and spool.
    #[command(after_help = exit::HELP)]
    Run(Deferred<run_cmd::RunArgs>),
    /// Run one command to completion and print its capture receipt (JSON): each stream's
    /// output up to --max-bytes and how it ended, the status, and what cut the run short.
    #[command(after_help = exit::HELP)]
    Capture(Deferred<capture_cmd::CaptureCmdArgs>),
    /// Run the daemon: a supervisor answering the client commands on a Unix socket.
    Serve(Deferred<daemon_cmd::ServeArgs>),
    /// Start a command under the daemon; prints its handle.
    Start(Deferred<daemon_cmd::StartCmdArgs>),
    /// Start a finished process's command again, as a new process linked to it; prints the
    /// new handle. Withheld environment values (`start --env`) must be given again.
    Restart(Deferred<daemon_cmd::RestartCmdArgs>),
    /// Resize the terminal of a process started with `--pty` (it gets SIGWINCH).
    Resize(Deferred<daemon_cmd::ResizeCmdArgs>),
    /// List processes (from the journal when no daemon runs).
    Ps(Deferred<ps_cmd::PsArgs>),
    /// Print a process's output from a cursor, a time (--since) or the last lines (--tail); -f
    /// follows it until the process ends; -t and --stream-marker prefix each line.
    Logs(Deferred<logs_cmd::LogsArgs>),
    /// Write to a process's stdin, from this command's stdin or --text.
    Send(Deferred<daemon_cmd::SendArgs>),
    /// Stop a process's whole tree: SIGTERM, the grace, SIGKILL.
    Stop(Deferred<daemon_cmd::StopArgs>),
    /// Send SIGINT to a process's group.
    Interrupt(Deferred<daemon_cmd::HandleCmdArgs>),
    /// Wait until a process ends; exits with its status.
    #[command(after_help = exit::HELP)]
    Wait(Deferred<daemon_cmd::WaitArgs>),
    /// Stop every process and the daemon.
    Shutdown(Deferred<daemon_cmd::ShutdownCmdArgs>),
    /// Delete the output of finished processes whose exit is verified and that ended long
    /// enough ago (the daemon does this every hour for output older than its retention age).
    Clean(Deferred<clean_cmd::CleanArgs>),
    /// Show admission: slots, in use, each workload's reservation, starts waiting, and the
    /// inputs (cores, available memory, share, floor).
    Admission(Deferred<daemon_cmd::AdmissionCmdArgs>),
    /// Close the pause gate: new starts are refused; running processes go on. Journaled: a
    /// restarted daemon stays paused.
    Pause(Deferred<daemon_cmd::GateCmdArgs>),
    /// Open the pause gate again.
    Resume(Deferred<daemon_cmd::GateCmdArgs>),
    /// Mark a process as waiting for human input: its idle limit is suspended until input is
    /// written to it (`send`) or the mark is cleared (`--clear`).
    AwaitInput(Deferred<daemon_cmd::AwaitInputCmdArgs>),
    /// Recovery tooling: read a journal offline.
    #[command(subcommand)]
    Journal(journal_cmd::JournalCommand),
    /// The fleet: what a NATS JetStream server holds of the nodes that ship to it (`serve
    /// --fleet`), read from the server alone.
    #[command(subcommand)]
    Fleet(fleet_cmd::FleetCommand),
    /// Recovery tooling: read a process's output spool offline.
    #[command(subcommand)]
    Spool(spool_cmd::SpoolCommand),
    /// A Model Context Protocol server on stdin/stdout for agent harnesses: tools to start,
    /// read, write to, stop, wait for and list processes on the runtime root.
    Mcp(Deferred<mcp_cmd::McpArgs>),
    /// Print a shell completion script, e.g. `procjournal completions bash >
    /// ~/.local/share/bash-completion/completions/procjournal`.
    Completions(Deferred<CompletionsArgs>),
    /// Print the man page (roff), e.g. `procjournal man | man -l -`; `procjournal man run`
    /// prints the page of one command.
    Man(Deferred<ManArgs>),
}

#[derive(Debug, clap::Args)]
struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

#[derive(Debug, clap::Args)]
struct ManArgs {
    /// A command (`run`, `journal dump`, ...) whose own page to print.
    command: Vec<String>,
}

/// `completions`: generated by clap_complete from the parser's own definition.
fn completions(args: CompletionsArgs) -> anyhow::Result<ExitCode> {
    let mut command = deferred::eager::<Cli>();
    // Into memory first: clap_complete panics when its writer fails (a closed pipe).
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "procjournal", &mut script);
    let mut out = std::io::stdout().lock();
    std::io::Write::write_all(&mut out, &script)?;
    std::io::Write::flush(&mut out)?;
    Ok(ExitCode::SUCCESS)
}

/// `man`: generated by clap_mangen from the parser's own definition.
fn man(args: ManArgs) -> anyhow::Result<ExitCode> {
    let mut command = deferred::eager::<Cli>();
    command.build();
    let mut name = String::from("procjournal");
    for word in &args.command {
        command = command.find_subcommand(word).cloned().with_context(|| {
            format!(
                "no command {}",
                crate::spool::render::escape_field(word, false)
            )
        })?;
        name = format!("{name}-{word}");
    }
    let command = command.name(name);
    let mut out = std::io::stdout().lock();
    clap_mangen::Man::new(command).render(&mut out)?;
    std::io::Write::flush(&mut out)?;
    Ok(ExitCode::SUCCESS)
}

/// Starts `procjournal serve --root ROOT [--socket S] EXTRA` detached (its own process group,
/// stdio to `daemon.log` in the root, one earlier log kept), so that it outlives the command
/// that started it: what `mcp` and the client commands that start processes do when no daemon
/// runs.
#[expect(
    clippy::disallowed_methods,
    reason = "the daemon is procjournal itself, detached: it owns its processes through src/tree"
)]
pub(crate) fn spawn_detached_daemon(
    root: &std::path::Path,
    socket: Option<&std::path::Path>,
    extra: &[std::ffi::OsString],
) -> std::io::Result<std::process::Child> {
    use crate::root::DAEMON_LOG;
    use std::os::unix::process::CommandExt;
    let dir = crate::root::RootDir::prepare(root, None).map_err(std::io::Error::other)?;
    // One earlier log is kept; a log is never let grow across many daemons.
    if dir
        .file_len(DAEMON_LOG)
        .is_some_and(|len| len > crate::limits::DAEMON_LOG_BYTES_MAX)
    {
        let _ = dir.rename(DAEMON_LOG, &format!("{DAEMON_LOG}.old"));
    }
    let log = dir.open_file(DAEMON_LOG, true, true)?;
    let mut command = std::process::Command::new(std::env::current_exe()?);
    command.arg("serve").arg("--root").arg(root);
    if strict() {
        command.arg("--strict");
    }
    if let Some(socket) = socket {
        command.arg("--socket").arg(socket);
    }
    command
        .args(extra)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .current_dir("/")
        .process_group(0)
        .spawn()
}

/// `--root DIR`, else `$PROCJOURNAL_ROOT`, else `$XDG_STATE_HOME/procjournal`, else
/// `~/.local/state/procjournal`.
pub fn default_root() -> anyhow::Result<PathBuf> {
    let env = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(root) = env("PROCJOURNAL_ROOT") {
        return Ok(root);
    }
    if let Some(state) = env("XDG_STATE_HOME") {
        return Ok(state.join("procjournal"));
    }
    match env("HOME") {
        Some(home) => Ok(home.join(".local/state/procjournal")),
        None => anyhow::bail!(
            "no --root given and neither PROCJOURNAL_ROOT, XDG_STATE_HOME nor HOME is set"
        ),
    }
}

/// [`root_or_default`] for the tools that only read a root: one that does not exist is an
/// error that says so (the writers, `run`, `serve` and `mcp`, create theirs).
pub(crate) fn existing_root(root: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let root = root_or_default(root)?;
    existing(&root)?;
    Ok(root)
}

/// Fails, saying so, when `root` is not a directory.
pub(crate) fn existing(root: &std::path::Path) -> anyhow::Result<()> {
    if !root.is_dir() {
        anyhow::bail!(
            "the runtime root {} does not exist (nothing has run under it)",
            root.display()
        );
    }
    Ok(())
}

pub(crate) fn root_or_default(root: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    match root {
        Some(root) => Ok(root),
        None => default_root(),
    }
}

/// Runs the CLI; the exit code is the command's verdict (see each command's help and
/// `exit.rs`).
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout and succeed; a usage error is procjournal's own
            // failure (clap's default, 2, could be a command's status).
            let e = escape_usage_error(e);
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(exit::FAILURE)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    STRICT.store(cli.strict, std::sync::atomic::Ordering::Relaxed);
    let result = match cli.command {
        Command::Run(args) => run_cmd::run(args.into_inner()),
        Command::Capture(args) => capture_cmd::run(args.into_inner()),
        Command::Serve(args) => daemon_cmd::serve(args.into_inner()),
        Command::Start(args) => daemon_cmd::start(args.into_inner()),
        Command::Restart(args) => daemon_cmd::restart(args.into_inner()),
        Command::Resize(args) => daemon_cmd::resize(args.into_inner()),
        Command::Ps(args) => ps_cmd::ps(args.into_inner()),
        Command::Logs(args) => logs_cmd::logs(args.into_inner()),
        Command::Send(args) => daemon_cmd::send(args.into_inner()),
        Command::Stop(args) => daemon_cmd::stop(args.into_inner()),
        Command::Interrupt(args) => daemon_cmd::interrupt(args.into_inner()),
        Command::Wait(args) => daemon_cmd::wait(args.into_inner()),
        Command::Shutdown(args) => daemon_cmd::shutdown(args.into_inner()),
        Command::Clean(args) => clean_cmd::clean(args.into_inner()),
        Command::Admission(args) => daemon_cmd::admission(args.into_inner()),
        Command::Pause(args) => daemon_cmd::gate(args.into_inner(), true),
        Command::Resume(args) => daemon_cmd::gate(args.into_inner(), false),
        Command::AwaitInput(args) => daemon_cmd::await_input(args.into_inner()),
        Command::Journal(cmd) => journal_cmd::run(cmd),
        Command::Fleet(cmd) => fleet_cmd::run(cmd),
        Command::Spool(cmd) => spool_cmd::run(cmd),
        Command::Mcp(args) => mcp_cmd::run(args.into_inner()),
        Command::Completions(args) => completions(args.into_inner()),
        Command::Man(args) => man(args.into_inner()),
    };
    match result {
        Ok(code) => code,
        Err(error) if out::broken_pipe(&error) => {
            // The reader went away (`procjournal man | head`): nothing more to say to it.
            ExitCode::SUCCESS
        }
        Err(error) => {
            // Errors may quote what a client sent (a program name, a label): escaped.
            let message = format!("{error:#}");
            note!(
                "procjournal: {}",
                crate::spool::render::escape_field(&message, true)
            );
            // A command the daemon could not spawn answers as a shell would (126, 127).
            match error.downcast_ref::<crate::client::ClientError>() {
                Some(crate::client::ClientError::Api(api))
                    if api.code == crate::protocol::ErrorCode::SpawnFailed =>
                {
                    exit::of_spawn(api.spawn)
                }
                _ => ExitCode::from(exit::FAILURE),
            }
        }
    }
}

/// A usage error quotes what was typed (an unknown argument or subcommand, an invalid value),
/// which may come from an untrusted string (`procjournal logs "$name"`): every string it quotes
/// is escaped before clap renders the message, in its colours on a terminal.
fn escape_usage_error(mut error: clap::Error) -> clap::Error {
    use clap::error::ContextValue;
    let escape = |s: &String| crate::spool::render::escape_field(s, false).into_owned();
    let quoted: Vec<_> = error
        .context()
        .filter_map(|(kind, value)| match value {
            ContextValue::String(s) => Some((kind, ContextValue::String(escape(s)))),
            ContextValue::Strings(v) => {
                Some((kind, ContextValue::Strings(v.iter().map(escape).collect())))
            }
            _ => None,
        })
        .collect();
    for (kind, value) in quoted {
        error.insert(kind, value);
    }
    error
}

/// Raises this process's soft descriptor limit to its hard limit, as long-running servers do
/// (systemd services, the Go runtime): the default soft limit of 1024 is a compatibility
/// setting for `select(2)`, which nothing here uses. The daemon then splits what it got
/// between connections and processes (`limits::descriptor_split`). Best effort: a limit that
/// cannot be raised is used as it is.
pub(crate) fn raise_open_files_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE)
        && soft < hard
    {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
}

/// Which mechanism owns each launched tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum TreeChoice {
    /// A guardian per launch, and its own cgroup v2 where the hierarchy is writable.
    Auto,
    /// A guardian with a cgroup; refuse to start without one.
    Cgroup,
    /// A guardian without a cgroup: stop quiesces the tree through the subreaper.
    #[value(alias = "quiesce")]
    Guardian,
    /// A plain process group (no guardian): a descendant that calls setsid escapes it.
    Group,
}

/// Admission's host limits, shared by the commands that supervise many processes (`serve`,
/// `mcp`). Without any, admission is automatic: 70 % of the cores and of the available memory,
/// 2 GiB reserved per workload.
#[derive(Debug, clap::Args)]
pub(crate) struct AdmissionArgs {
    /// At most this many workloads at once; replaces the automatic admission (cores and
    /// available memory are then not consulted).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_concurrent: Option<u64>,
    /// A memory budget all workloads' reservations share, e.g. 16G; replaces the automatic
    /// admission.
    #[arg(long, value_name = "SIZE", value_parser = parse_budget)]
    pub memory_budget: Option<u64>,
    /// Percent of cores and available memory automatic admission may spend (1-100).
    #[arg(long, value_name = "PERCENT", default_value_t = crate::limits::ADMISSION_SHARE_PERCENT_DEFAULT,
          value_parser = clap::value_parser!(u8).range(1..=100))]
    pub share: u8,
    /// Memory reserved per workload until a stable sample of its tree says more, e.g. 2G.
    #[arg(long, value_name = "SIZE", value_parser = parse_budget)]
    pub floor: Option<u64>,
}

fn parse_budget(text: &str) -> Result<u64, String> {
    match size::parse_size(text) {
        Ok(0) => Err("must be positive".to_owned()),
        Ok(bytes) => Ok(bytes),
        Err(e) => Err(e.to_string()),
    }
}

impl AdmissionArgs {
    pub(crate) fn apply(&self, config: &mut crate::admission::AdmissionConfig) {
        config.max_concurrent = self
            .max_concurrent
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
        config.memory_budget_bytes = self.memory_budget;
        config.share_percent = self.share;
        if let Some(floor) = self.floor {
            config.floor_bytes = floor;
        }
    }
}

/// `--tree-mechanism`, shared by the commands that supervise.
#[derive(Debug, clap::Args)]
pub(crate) struct TreeArgs {
    /// Which mechanism owns each launched tree.
    #[arg(long = "tree-mechanism", value_enum, default_value = "auto")]
    pub tree: TreeChoice,
}

impl TreeArgs {
    /// The launcher for `root`; with `auto`, says on stderr why no cgroup is used (`quiet`
    /// leaves that to the caller's verbosity, and defers the probe to the launcher's
    /// preparation, beside the open, or its first launch). Guardians are forked by a zygote,
    /// started at the first launch, or beside the open with `launching` (the caller opens its
    /// root and launches once, right away, as `run` does: [`open_supervisor`] prepares the
    /// launcher while the root opens, and the zygote becomes the one launch's guardian).
    pub(crate) fn launcher(
        &self,
        root: &std::path::Path,
        quiet: bool,
        launching: bool,
    ) -> anyhow::Result<std::sync::Arc<dyn crate::tree::Launcher>> {
        use crate::tree::{GroupLauncher, GuardianLauncher, GuardianProgram};
        // `procjournal-guardian` beside this binary, else this binary re-executed (said once).
        let guardian = || {
            GuardianLauncher::new(GuardianProgram::beside_current_exe())
                .map(|l| l.with_zygote(true).with_one_launch(launching))
        };
        let cgroups =
            || crate::tree::cgroup::CgroupBase::probe(&crate::tree::cgroup::base_name(root));
        Ok(match self.tree {
            TreeChoice::Group => std::sync::Arc::new(GroupLauncher),
            TreeChoice::Guardian => std::sync::Arc::new(guardian()?),
            TreeChoice::Cgroup => {
                let base = cgroups().map_err(|e| anyhow::anyhow!("no usable cgroup: {e}"))?;
                std::sync::Arc::new(guardian()?.with_cgroups(Some(base)))
            }
            // Said nowhere: probed beside the open (`open_supervisor`) instead of before it.
            TreeChoice::Auto if quiet => std::sync::Arc::new(
                guardian()?.with_cgroup_probe(&crate::tree::cgroup::base_name(root)),
            ),
            TreeChoice::Auto => match cgroups() {
                Ok(base) => std::sync::Arc::new(guardian()?.with_cgroups(Some(base))),
                Err(e) => {
                    if !quiet {
                        note!("procjournal: no per-launch cgroup ({e}); guardians only");
                    }
                    std::sync::Arc::new(guardian()?)
                }
            },
        })
    }
}

/// `2026-12-01 14:43:59 UTC` for a time in milliseconds since the epoch (UTC, so that the same
/// record reads the same everywhere; the proleptic Gregorian calendar of Howard Hinnant's
/// `civil_from_days`).
pub(crate) fn unix_ms_text(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod time_tests {
    #[test]
    fn unix_times_print_as_utc_dates() {
        assert_eq!(super::unix_ms_text(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(
            super::unix_ms_text(1_796_136_239_999),
            "2026-12-01 14:43:59 UTC"
        );
        assert_eq!(
            super::unix_ms_text(951_782_400_000),
            "2000-02-29 00:00:00 UTC"
        );
    }
}
