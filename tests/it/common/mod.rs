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
