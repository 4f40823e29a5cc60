//! When the drain leaves a write-behind to the next checkpoint: the rate its output came at
//! turns the spool's window over within one checkpoint interval.

use std::time::Duration;

use super::window_turns_over;

const MIB: u64 = 1024 * 1024;
const SECOND: Duration = Duration::from_secs(1);

/// The default window (64 MiB) and interval (1 s): 64 MiB/s is where a segment written back now
/// would be dropped before the next checkpoint.
#[test]
fn a_window_turns_over_at_one_window_per_checkpoint_interval() {
    let turns = |ms| window_turns_over(8 * MIB, Duration::from_millis(ms), SECOND, 64 * MIB);
    assert!(turns(10), "800 MiB/s");
    assert!(turns(125), "exactly 64 MiB/s");
    assert!(!turns(126), "just under 64 MiB/s");
    assert!(!turns(1000), "8 MiB/s");
    // A larger window or a shorter interval needs a faster writer.
    assert!(!window_turns_over(
        8 * MIB,
        Duration::from_millis(10),
        SECOND,
        1024 * MIB
    ));
    assert!(window_turns_over(
        8 * MIB,
        Duration::from_millis(5),
        SECOND,
        1024 * MIB
    ));
    let short = Duration::from_millis(100);
    assert!(!window_turns_over(
        8 * MIB,
        Duration::from_millis(125),
        short,
        64 * MIB
    ));
}

/// No output never turns a window over, however little time passed; output in no time always
/// does; the products do not overflow at the extremes.
#[test]
fn the_edges_are_total() {
    assert!(!window_turns_over(0, Duration::ZERO, SECOND, 64 * MIB));
    assert!(!window_turns_over(0, SECOND, SECOND, 1));
    assert!(window_turns_over(1, Duration::ZERO, SECOND, u64::MAX));
    assert!(!window_turns_over(1, SECOND, Duration::ZERO, 1));
    assert!(window_turns_over(
        u64::MAX,
        Duration::MAX,
        Duration::MAX,
        u64::MAX
    ));
    assert!(window_turns_over(u64::MAX, SECOND, Duration::MAX, u64::MAX));
    assert!(!window_turns_over(1, Duration::MAX, SECOND, u64::MAX));
}
