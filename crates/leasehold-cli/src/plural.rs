//! Counts in words: "1 waiter", "2 waiters", "0 waiters".

use std::fmt::Display;

/// `n` followed by `one` when it is 1, by `many` otherwise.
pub(crate) fn count<N>(n: N, one: &str, many: &str) -> String
where
    N: Display + PartialEq + From<u8>,
{
    if n == N::from(1) {
        format!("{n} {one}")
    } else {
        format!("{n} {many}")
    }
}

#[cfg(test)]
mod tests {
    use super::count;

    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(count(1u64, "waiter", "waiters"), "1 waiter");
        assert_eq!(count(0u64, "waiter", "waiters"), "0 waiters");
        assert_eq!(count(2usize, "reader", "readers"), "2 readers");
        assert_eq!(count(11u16, "worker", "workers"), "11 workers");
    }
}
