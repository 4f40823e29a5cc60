//! A command whose arguments clap defines only when the command line names it: every
//! invocation of the CLI used to define all of them, about a fifth of what `procjournal
//! --version` costs in CPU, before it ran its one command.
//!
//! [`Deferred`] wraps a derived [`clap::Args`] and hands clap the same definitions through
//! [`clap::Command::defer`], which clap runs when it builds that command: when the parser enters
//! it, and for help, completions, the man page and `debug_assert` (which build every command).
//! So what the command line accepts, prints and generates is unchanged; only the work of
//! defining the commands not named is skipped. (A group's subcommands, `journal dump` and the
//! like, are named at once; each one's arguments are deferred the same way.)
//!
//! Invariants:
//! - A command holds one deferred definition at most (`Command::defer` replaces any earlier
//!   one), so the wrapper is the only thing that defers on a command; nothing else here calls
//!   `defer`.
//! - [`eager`] gives the command exactly as the derive alone builds it; the generators use it.
//! - Parsing back is the wrapped type's own (`FromArgMatches` forwards unchanged).

use std::cell::Cell;

use clap::{ArgMatches, Args, Command, CommandFactory, FromArgMatches};

thread_local! {
    /// Set while [`eager`] makes its command on this thread: every [`Deferred`] then adds its
    /// definitions at once. Per thread, so that a command made on another thread meanwhile
    /// (tests run in parallel) is deferred as usual.
    static EAGER: Cell<bool> = const { Cell::new(false) };
}

/// `C`'s whole command with every definition added at once, as the derive alone would: for
/// the generators (completions, the man page), whose output follows the order in which clap
/// adds arguments, and a global one (`--strict`) is otherwise added to a deferred command
/// before its own.
pub(crate) fn eager<C: CommandFactory>() -> Command {
    EAGER.set(true);
    let command = C::command();
    EAGER.set(false);
    command
}

/// `T`'s definitions, built only when clap builds the command that holds them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Deferred<T>(pub(crate) T);

impl<T> Deferred<T> {
    pub(crate) fn into_inner(self) -> T {
        self.0
    }
}

impl<T: FromArgMatches> FromArgMatches for Deferred<T> {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        T::from_arg_matches(matches).map(Deferred)
    }

    fn from_arg_matches_mut(matches: &mut ArgMatches) -> Result<Self, clap::Error> {
        T::from_arg_matches_mut(matches).map(Deferred)
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        self.0.update_from_arg_matches(matches)
    }

    fn update_from_arg_matches_mut(&mut self, matches: &mut ArgMatches) -> Result<(), clap::Error> {
        self.0.update_from_arg_matches_mut(matches)
    }
}

impl<T: Args> Args for Deferred<T> {
    fn group_id() -> Option<clap::Id> {
        T::group_id()
    }

    fn augment_args(cmd: Command) -> Command {
        if EAGER.get() {
            return T::augment_args(cmd);
        }
        cmd.defer(with_own_text::<T, false>)
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        if EAGER.get() {
            return T::augment_args_for_update(cmd);
        }
        cmd.defer(with_own_text::<T, true>)
    }
}

/// `T`'s arguments added to `cmd`, which keeps the text its own definition gave it. Built at
/// once, the derive adds the arguments first and then the command's own `about` and
/// `long_about` (its doc comment), so a flattened struct's doc comment never shows; deferred,
/// the arguments come after, so the command's text is put back over theirs.
fn with_own_text<T: Args, const UPDATE: bool>(cmd: Command) -> Command {
    let about = cmd.get_about().cloned();
    let long_about = cmd.get_long_about().cloned();
    let cmd = if UPDATE {
        T::augment_args_for_update(cmd)
    } else {
        T::augment_args(cmd)
    };
    let cmd = match about {
        Some(text) => cmd.about(text),
        None => cmd.about(None::<&str>),
    };
    match long_about {
        Some(text) => cmd.long_about(text),
        None => cmd.long_about(None::<&str>),
    }
}

#[cfg(test)]
mod tests {
    use clap::{Command, CommandFactory, Parser};

    use super::super::Cli;

    /// Every command under `cmd` (built), by its path of names.
    fn commands(cmd: &Command, path: &str, into: &mut Vec<(String, Command)>) {
        for sub in cmd.get_subcommands() {
            let path = format!("{path} {}", sub.get_name());
            into.push((path.clone(), sub.clone()));
            commands(sub, &path, into);
        }
    }

    fn arguments(cmd: &Command) -> Vec<String> {
        let mut args: Vec<String> = cmd.get_arguments().map(|a| format!("{a:?}")).collect();
        args.sort();
        args
    }

    #[test]
    fn a_deferred_command_line_reads_and_helps_as_the_eager_one() {
        let mut lazy = Cli::command();
        lazy.build();
        let mut eager = super::eager::<Cli>();
        eager.build();
        let (mut lazy_all, mut eager_all) = (Vec::new(), Vec::new());
        commands(&lazy, "procjournal", &mut lazy_all);
        commands(&eager, "procjournal", &mut eager_all);
        assert!(eager_all.len() > 30, "{} commands", eager_all.len());
        assert_eq!(
            lazy_all.iter().map(|(p, _)| p).collect::<Vec<_>>(),
            eager_all.iter().map(|(p, _)| p).collect::<Vec<_>>()
        );
        for ((path, mut lazy), (_, mut eager)) in lazy_all.into_iter().zip(eager_all) {
            assert_eq!(arguments(&lazy), arguments(&eager), "{path}");
            let help = |c: &mut Command| (c.render_help(), c.render_long_help(), c.render_usage());
            let (short, long, usage) = help(&mut lazy);
            let (eager_short, eager_long, eager_usage) = help(&mut eager);
            assert_eq!(short.to_string(), eager_short.to_string(), "{path} -h");
            assert_eq!(long.to_string(), eager_long.to_string(), "{path} --help");
            assert_eq!(usage.to_string(), eager_usage.to_string(), "{path} usage");
        }
    }

    #[test]
    fn only_the_command_named_is_defined() {
        let lazy = Cli::command();
        let eager = super::eager::<Cli>();
        let paths: [&[&str]; 8] = [
            &["run"],
            &["start"],
            &["wait"],
            &["logs"],
            &["serve"],
            &["journal", "dump"],
            &["spool", "cat"],
            &["fleet", "events"],
        ];
        for path in paths {
            let defined = |c: &Command| {
                let found = path.iter().try_fold(c, |c, name| c.find_subcommand(name));
                found.map(|s| s.get_arguments().count())
            };
            assert_eq!(
                defined(&lazy),
                Some(0),
                "{path:?} defined before it is named"
            );
            assert!(defined(&eager) > Some(1), "{path:?}: {:?}", defined(&eager));
        }
        let cli = Cli::try_parse_from(["procjournal", "--strict", "run", "--", "true", "-x"]);
        let cli = cli.expect("run parses");
        assert!(cli.strict);
        let super::super::Command::Run(args) = cli.command else {
            panic!("not run: {:?}", cli.command);
        };
        assert!(format!("{args:?}").contains("\"-x\""), "{args:?}");
    }
}
