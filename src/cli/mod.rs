//! The command-line surface. Errors get their context here, at the edge (anyhow); the library
//! below returns typed errors.
//!
//! Recovery tooling (`journal ...`) is offline and read-only: it takes no lock and never writes, so
//! it may run against a root that a live writer holds.

mod capture_cmd;
mod clean_cmd;
mod daemon_cmd;
mod journal_cmd;
mod mcp_cmd;
mod progress;
mod run_cmd;
mod size;
mod spool_cmd;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "procjournal",
    version,
    about = "Durable supervision of long-running commands"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Supervise one command in the foreground: stream its output, forward Ctrl-C, exit with its
    /// status, and keep everything in the journal and spool.
    Run(run_cmd::RunArgs),
    /// Run one command to completion and print its capture receipt (JSON): each stream's
    /// output up to --max-bytes and how it ended, the status, and what cut the run short.
    Capture(capture_cmd::CaptureCmdArgs),
    /// Run the daemon: a supervisor answering the client commands on a Unix socket.
    Serve(daemon_cmd::ServeArgs),
    /// Start a command under the daemon; prints its handle.
    Start(daemon_cmd::StartCmdArgs),
    /// Start a finished process's command again, as a new process linked to it; prints the
    /// new handle. Withheld environment values (`start --env`) must be given again.
    Restart(daemon_cmd::RestartCmdArgs),
    /// Resize the terminal of a process started with `--pty` (it gets SIGWINCH).
    Resize(daemon_cmd::ResizeCmdArgs),
    /// List processes (from the journal when no daemon runs).
    Ps(daemon_cmd::PsArgs),
    /// Print a process's output from a cursor; -f follows it until the process ends.
    Logs(daemon_cmd::LogsArgs),
    /// Write to a process's stdin, from this command's stdin or --text.
    Send(daemon_cmd::SendArgs),
    /// Stop a process's whole tree: SIGTERM, the grace, SIGKILL.
    Stop(daemon_cmd::StopArgs),
    /// Send SIGINT to a process's group.
    Interrupt(daemon_cmd::HandleCmdArgs),
    /// Wait until a process ends; exits with its status.
    Wait(daemon_cmd::WaitArgs),
    /// Stop every process and the daemon.
    Shutdown(daemon_cmd::ShutdownCmdArgs),
    /// Delete the output of finished processes whose exit is verified and that ended long
    /// enough ago (the daemon does this every hour for output older than its retention age).
    Clean(clean_cmd::CleanArgs),
    /// Show admission: slots, in use, each workload's reservation, starts waiting, and the
    /// inputs (cores, available memory, share, floor).
    Admission(daemon_cmd::AdmissionCmdArgs),
    /// Close the pause gate: new starts are refused; running processes go on. Journaled: a
    /// restarted daemon stays paused.
    Pause(daemon_cmd::GateCmdArgs),
    /// Open the pause gate again.
    Resume(daemon_cmd::GateCmdArgs),
    /// Mark a process as waiting for human input: its idle limit is suspended until input is
    /// written to it (`send`) or the mark is cleared (`--clear`).
    AwaitInput(daemon_cmd::AwaitInputCmdArgs),
    /// Recovery tooling: read a journal offline.
    #[command(subcommand)]
    Journal(journal_cmd::JournalCommand),
    /// Recovery tooling: read a process's output spool offline.
    #[command(subcommand)]
    Spool(spool_cmd::SpoolCommand),
    /// A Model Context Protocol server on stdin/stdout for agent harnesses: tools to start,
    /// read, write to, stop, wait for and list processes on the runtime root.
    Mcp(mcp_cmd::McpArgs),
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

/// Runs the CLI; the exit code is the command's verdict (see each command's help).
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run_cmd::run(args),
        Command::Capture(args) => capture_cmd::run(args),
        Command::Serve(args) => daemon_cmd::serve(args),
        Command::Start(args) => daemon_cmd::start(args),
        Command::Restart(args) => daemon_cmd::restart(args),
        Command::Resize(args) => daemon_cmd::resize(args),
        Command::Ps(args) => daemon_cmd::ps(args),
        Command::Logs(args) => daemon_cmd::logs(args),
        Command::Send(args) => daemon_cmd::send(args),
        Command::Stop(args) => daemon_cmd::stop(args),
        Command::Interrupt(args) => daemon_cmd::interrupt(args),
        Command::Wait(args) => daemon_cmd::wait(args),
        Command::Shutdown(args) => daemon_cmd::shutdown(args),
        Command::Clean(args) => clean_cmd::clean(args),
        Command::Admission(args) => daemon_cmd::admission(args),
        Command::Pause(args) => daemon_cmd::gate(args, true),
        Command::Resume(args) => daemon_cmd::gate(args, false),
        Command::AwaitInput(args) => daemon_cmd::await_input(args),
        Command::Journal(cmd) => journal_cmd::run(cmd),
        Command::Spool(cmd) => spool_cmd::run(cmd),
        Command::Mcp(args) => mcp_cmd::run(args),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            // Errors may quote what a client sent (a program name, a label): escaped.
            let message = format!("{error:#}");
            eprintln!(
                "procjournal: {}",
                crate::render::escape_field(&message, true)
            );
            ExitCode::from(2)
        }
    }
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
    /// leaves that to the caller's verbosity).
    pub(crate) fn launcher(
        &self,
        root: &std::path::Path,
        quiet: bool,
    ) -> anyhow::Result<std::sync::Arc<dyn crate::tree::Launcher>> {
        use crate::tree::{GroupLauncher, GuardianLauncher, GuardianProgram};
        let guardian = || GuardianLauncher::new(GuardianProgram::CurrentExe);
        let cgroups =
            || crate::tree::cgroup::CgroupBase::probe(&crate::tree::cgroup::base_name(root));
        Ok(match self.tree {
            TreeChoice::Group => std::sync::Arc::new(GroupLauncher),
            TreeChoice::Guardian => std::sync::Arc::new(guardian()?),
            TreeChoice::Cgroup => {
                let base = cgroups().map_err(|e| anyhow::anyhow!("no usable cgroup: {e}"))?;
                std::sync::Arc::new(guardian()?.with_cgroups(Some(base)))
            }
            TreeChoice::Auto => match cgroups() {
                Ok(base) => std::sync::Arc::new(guardian()?.with_cgroups(Some(base))),
                Err(e) => {
                    if !quiet {
                        eprintln!("procjournal: no per-launch cgroup ({e}); guardians only");
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
