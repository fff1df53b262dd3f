//! A per-thread xorshift generator for power-of-two-choices: two random indexes per
//! pick without locks, syscalls or allocation. Not for anything security-relevant.

use std::cell::Cell;

thread_local! {
    static STATE: Cell<u64> = Cell::new(seed());
}

fn seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0x9E37_79B9_7F4A_7C15);
    h.finish() | 1
}

/// The next pseudo-random `u64` (xorshift64*).
pub(crate) fn next_u64() -> u64 {
    STATE.with(|s| {
        let mut x = s.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    })
}

/// Two distinct indexes below `n` (`n >= 2`).
pub(crate) fn two_distinct(n: usize) -> (usize, usize) {
    let r = next_u64();
    let n64 = n as u64;
    let a = (((r >> 32) * n64) >> 32) as usize;
    let b = (((r & 0xFFFF_FFFF) * (n64 - 1)) >> 32) as usize;
    let b = if b >= a { b + 1 } else { b };
    (a.min(n - 1), b.min(n - 1))
}

#[cfg(test)]
mod tests {
    #[test]
    fn indexes_are_distinct_and_in_range() {
        for n in 2..50 {
            for _ in 0..200 {
                let (a, b) = super::two_distinct(n);
                assert!(a < n && b < n && a != b, "{n}: {a} {b}");
            }
        }
    }
}
