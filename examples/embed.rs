//! Embedding procjournal in a host: open a supervisor on a root, start a command, read its
//! output by cursor, wait for it, and find it again after a reopen (what a host does after its
//! own crash). Run with `cargo run --example embed`; it uses a fresh root under the temp dir.
//!
//! Only the library's core is used (journal, spool, lifecycle, supervisor): it builds with
//! `default-features = false`.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "an example is a host: it may start processes of its own"
)]

use std::time::Duration;

use procjournal::{Command, Services, Supervisor, SupervisorConfig};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A host that is re-executed as a process-tree guardian must let it run first.
    procjournal::run_guardian_if_requested();

    let root = std::env::temp_dir().join(format!("procjournal-embed-{}", std::process::id()));
    let config = SupervisorConfig::new(&root);
    let (supervisor, _report) = Supervisor::open(config, Services::noop()).await?;

    let command = Command::new("sh")
        .args(["-c", "echo hello from $NAME; echo oops >&2; exit 3"])
        .cwd(std::env::current_dir()?)
        .env_persisted("NAME", "the embed example")
        .name("embed-demo");
    let handle = supervisor.start(supervisor.prepare(command)?).await?;
    let end = supervisor
        .wait(&handle, Some(Duration::from_secs(30)))
        .await?;
    println!("{handle} ended {:?} with {:?}", end.state, end.exit);

    // Output is one combined stream, read from any cursor; `spans` say which bytes came from
    // stdout and which from stderr.
    let read = supervisor.output_raw(&handle, 0, 64 << 10).await?;
    print!("{}", String::from_utf8_lossy(&read.bytes));
    supervisor.shutdown(Duration::from_secs(5)).await;
    drop(supervisor);

    // A new supervisor on the same root (as after a crash of the host) finds everything again.
    let (supervisor, _) = Supervisor::open(SupervisorConfig::new(&root), Services::noop()).await?;
    let manifest = supervisor
        .manifest(&handle)
        .ok_or("the process was not found after the reopen")?;
    println!(
        "after reopen: #{} {} {:?}, {} output bytes",
        manifest.number, manifest.handle, manifest.state, manifest.bounds.total_bytes
    );
    supervisor.shutdown(Duration::from_secs(5)).await;
    std::fs::remove_dir_all(&root)?;
    Ok(())
}
