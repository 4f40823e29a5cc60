//! Power cuts at random moments of a supervised spool's life: appends, checkpoints, removal-only
//! plans, spares made and written over, spares given up. Whatever a cut leaves (`powerloss.rs`:
//! unsynced pages and cuts kept or lost one by one, directory entries after the last directory
//! sync kept up to any point), recovery reads every byte the last checkpoint made durable, from
//! where the window then starts, exactly: no loss, no damage, no splice.

use std::sync::Arc;

use super::format::Stream;
use super::powerloss::PowerLossIo;
use super::tests::Model;
use super::*;

struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

const OPTIONS: SpoolOptions = SpoolOptions {
    segment_bytes: 4096,
    retention_bytes: 8192,
};

/// What one scenario checked: durable bytes read back, and whether spares were in play.
#[derive(Default)]
struct Checked {
    bytes: u64,
    cuts_with_spares: u64,
}

/// Runs the writer's life for `seed`, cuts the power, recovers the leftover and checks it.
fn scenario(seed: u64, checked: &mut Checked) {
    let mut rng = XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let dir = tempfile::tempdir().unwrap();
    let seam = Arc::new(PowerLossIo::new());
    let path = dir.path().join("s");
    let (mut spool, _) = Spool::open_writer_with(&path, [3; 16], OPTIONS, seam.clone()).unwrap();
    spool.defer_removals();
    let mut model = Model::default();
    // The last checkpoint's bounds: what a journal would have recorded.
    let mut recorded = (0, 0);
    for i in 0..1 + rng.below(60) {
        let stream = if i % 3 == 0 {
            Stream::Stderr
        } else {
            Stream::Stdout
        };
        let n = 1 + rng.below(3000) as usize;
        let bytes: Vec<u8> = (0..n)
            .map(|j| ((model.bytes.len() + j) as u64 ^ seed) as u8)
            .collect();
        spool.append(stream, &bytes).unwrap();
        model.append(stream, &bytes);
        spool.flush().unwrap();
        match rng.below(5) {
            0 => {
                let plan = spool.plan_sync().unwrap();
                recorded = spool.finish_sync(plan.run()).unwrap();
            }
            1 | 2 => {
                let plan = spool.plan_removals();
                spool.finish_sync(plan.run()).unwrap();
            }
            3 if spool.retire_idle_spares() => {
                let plan = spool.plan_removals();
                spool.finish_sync(plan.run()).unwrap();
            }
            _ => {}
        }
    }
    if rng.below(6) == 0 {
        // The process ended: the last plan removes the spares and cuts the newest file.
        spool.finish();
        let plan = spool.plan_sync().unwrap();
        recorded = spool.finish_sync(plan.run()).unwrap();
    }
    checked.cuts_with_spares += u64::from(!spool.spares.is_empty() || spool.stale_to > 0);
    // Retention may drop durable bytes after the checkpoint that recorded them: those below the
    // writer's window at the cut may be gone, and only those.
    let window = spool.retained_from();
    let leftover = seam.leftover(&mut |n| rng.below(n));
    // A cut process runs nothing more: no drop, no cleanup.
    std::mem::forget(spool);

    let after = tempfile::tempdir().unwrap();
    let path = after.path().join("s");
    std::fs::create_dir(&path).unwrap();
    for (name, bytes) in &leftover {
        std::fs::write(path.join(name), bytes).unwrap();
    }
    let (recovered, recovery) = Spool::open_writer(&path, [3; 16], OPTIONS)
        .unwrap_or_else(|e| panic!("seed {seed}: the leftover does not open: {e}"));
    let (retained_from, durable) = recorded;
    let owed = retained_from.max(window);
    if owed < durable {
        assert!(
            recovered.total_bytes() >= durable && recovered.retained_from() <= owed,
            "seed {seed}: durable bytes {owed}..{durable} lost: the spool holds {}..{}; \
             {recovery:?}; {:?}",
            recovered.retained_from(),
            recovered.total_bytes(),
            leftover.keys().collect::<Vec<_>>()
        );
    }
    // Whatever durable bytes the files still hold read back exactly, never as damage.
    let end = durable.min(recovered.total_bytes());
    let mut at = recovered.retained_from().max(retained_from);
    while at < end {
        let read = recovered
            .read(at, (end - at) as usize)
            .unwrap_or_else(|e| panic!("seed {seed}: reading {at}..{end}: {e}; {recovery:?}"));
        assert!(
            read.skipped.is_none() && !read.bytes.is_empty(),
            "seed {seed}: a hole at {at} below the durable {durable}: {:?}; {recovery:?}",
            read.skipped
        );
        let end = at as usize + read.bytes.len();
        assert!(
            read.bytes == model.bytes[at as usize..end],
            "seed {seed}: bytes {at}..{end} differ"
        );
        checked.bytes += read.bytes.len() as u64;
        at = read.next_cursor;
    }
}

/// 400 lives, each cut once (`PROCJOURNAL_POWERLOSS_SEEDS=N` runs N instead: 6 000 passed).
#[test]
fn no_power_cut_loses_or_damages_a_durable_byte() {
    let mut checked = Checked::default();
    let seeds = std::env::var("PROCJOURNAL_POWERLOSS_SEEDS").map_or(400, |s| s.parse().unwrap());
    for seed in 0..seeds {
        scenario(seed, &mut checked);
    }
    assert!(
        checked.bytes > 100_000,
        "too little was checked: {}",
        checked.bytes
    );
    assert!(
        checked.cuts_with_spares > 100,
        "spares were in play at {} cuts only",
        checked.cuts_with_spares
    );
}
