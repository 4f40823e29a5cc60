//! Helpers the integration-test modules share. Each is a module of its own so that a test names
//! what it leans on (`use crate::common::daemon;`).

pub mod bounded;
#[cfg(feature = "cli")]
pub mod daemon;
pub mod rng;
#[cfg(feature = "mcp")]
pub mod schema;
pub mod supervisor;
pub mod tmpfs;

/// The name the test harness knows test `name` of module `module_path` by, for a test that
/// re-executes this binary to run one test as its child (`--exact NAME`): the module path
/// without this crate's own name (`it::spool_crash` → `spool_crash::NAME`).
pub fn harness_name(module_path: &str, name: &str) -> String {
    let module = module_path
        .split_once("::")
        .map_or("", |(_crate, module)| module);
    if module.is_empty() {
        name.to_owned()
    } else {
        format!("{module}::{name}")
    }
}

/// A child process killed and reaped when dropped, a failed assertion's unwinding included: a
/// test's `yes`, or a `run` whose tree must end (through its guardian's lifeline) before the
/// test's directories go.
pub struct Killed(pub std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
