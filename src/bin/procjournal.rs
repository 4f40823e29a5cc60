//! The `procjournal` binary: everything lives in the library's `cli` module.

fn main() -> std::process::ExitCode {
    procjournal::cli::main()
}
