//! The crate's one lock type, [`Lock`]: a std mutex whose `lock` never panics and never returns
//! an error.
//!
//! Invariant: a critical section under a `Lock` leaves its data consistent at every point where
//! it could panic, so a lock poisoned by a panic (a bug the panic already reports) still guards
//! usable data and the next holder goes on. clippy's `disallowed-types` (clippy.toml) keeps the
//! std types out of the rest of the crate, so every lock is one of these and every holder has the
//! same poison rule; which locks the supervisor may hold is checked by tests/it/tidy.rs.
#![expect(
    clippy::disallowed_types,
    reason = "the one place the std mutex is named: everything else locks a Lock"
)]

use std::sync::{Mutex, MutexGuard, PoisonError};

/// A mutex whose guard is had by waiting, never by handling poison (module docs).
#[derive(Debug, Default)]
pub struct Lock<T>(Mutex<T>);

impl<T> Lock<T> {
    pub const fn new(value: T) -> Self {
        Lock(Mutex::new(value))
    }

    /// Waits for the lock; a poisoned one is taken as it is.
    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::Lock;

    #[test]
    fn a_poisoned_lock_is_taken_as_it_is() {
        let lock = std::sync::Arc::new(Lock::new(1));
        let held = lock.clone();
        let panicked = std::thread::spawn(move || {
            let mut guard = held.lock();
            *guard = 2;
            panic!("poison the lock");
        })
        .join();
        assert!(panicked.is_err());
        assert_eq!(
            *lock.lock(),
            2,
            "the poisoned data is what the panicking holder left"
        );
    }
}
