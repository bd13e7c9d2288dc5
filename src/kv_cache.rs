//! KV-cache bookkeeping: the only owner of per-sequence lengths. The K/V buffers themselves are
//! created from the memory plan (`kv.k.{layer}`, `kv.v.{layer}`); this module decides which rows
//! a batch writes, refuses a batch past the context with a clear error, and rolls back rejected
//! speculative rows with [`KvCache::truncate_to`] (rows past a sequence's length are ignored by
//! attention and overwritten later, so truncation costs nothing on the device).

use std::ops::Range;

/// Errors of the cache bookkeeping.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvError {
    #[error("context full: sequence {seq} holds {len} of {capacity} tokens and {n} more were asked for (raise -c)")]
    ContextFull {
        seq: usize,
        len: u32,
        n: u32,
        capacity: u32,
    },
    #[error("sequence {seq} does not exist ({n_seq} sequences)")]
    NoSuchSequence { seq: usize, n_seq: usize },
    #[error("cannot truncate sequence {seq} to {pos}: it holds {len} tokens")]
    TruncatePastEnd { seq: usize, pos: u32, len: u32 },
}

/// Lengths of every sequence of a cache of `capacity` rows per sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvCache {
    capacity: u32,
    lens: Vec<u32>,
}

impl KvCache {
    pub fn new(capacity: u32, n_seq: usize) -> KvCache {
        KvCache {
            capacity,
            lens: vec![0; n_seq.max(1)],
        }
    }

    /// Rows per sequence.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    pub fn n_seq(&self) -> usize {
        self.lens.len()
    }

    fn check(&self, seq: usize) -> Result<u32, KvError> {
        self.lens.get(seq).copied().ok_or(KvError::NoSuchSequence {
            seq,
            n_seq: self.lens.len(),
        })
    }

    /// Tokens sequence `seq` holds (the next position to write).
    pub fn len(&self, seq: usize) -> Result<u32, KvError> {
        self.check(seq)
    }

    /// True when every sequence is empty.
    pub fn is_empty(&self) -> bool {
        self.lens.iter().all(|&l| l == 0)
    }

    /// Positions `len..len + n` for a batch of `n` rows, without committing them.
    pub fn positions(&self, seq: usize, n: u32) -> Result<Range<u32>, KvError> {
        let len = self.check(seq)?;
        match len.checked_add(n) {
            Some(end) if end <= self.capacity => Ok(len..end),
            _ => Err(KvError::ContextFull {
                seq,
                len,
                n,
                capacity: self.capacity,
            }),
        }
    }

    /// Record that `n` rows were written after the current length.
    pub fn commit(&mut self, seq: usize, n: u32) -> Result<Range<u32>, KvError> {
        let range = self.positions(seq, n)?;
        if let Some(l) = self.lens.get_mut(seq) {
            *l = range.end;
        }
        Ok(range)
    }

    /// Keep positions `< pos` of sequence `seq` (speculative rollback).
    pub fn truncate_to(&mut self, seq: usize, pos: u32) -> Result<(), KvError> {
        let len = self.check(seq)?;
        if pos > len {
            return Err(KvError::TruncatePastEnd { seq, pos, len });
        }
        if let Some(l) = self.lens.get_mut(seq) {
            *l = pos;
        }
        Ok(())
    }

    /// Empty sequence `seq`.
    pub fn reset(&mut self, seq: usize) -> Result<(), KvError> {
        self.truncate_to(seq, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_truncate_and_the_context_limit() {
        let mut kv = KvCache::new(8, 2);
        assert_eq!(kv.commit(0, 5).unwrap(), 0..5);
        assert_eq!(kv.positions(0, 3).unwrap(), 5..8);
        assert_eq!(
            kv.commit(0, 4),
            Err(KvError::ContextFull {
                seq: 0,
                len: 5,
                n: 4,
                capacity: 8
            })
        );
        kv.truncate_to(0, 2).unwrap();
        assert_eq!(kv.len(0).unwrap(), 2);
        assert!(matches!(
            kv.truncate_to(0, 3),
            Err(KvError::TruncatePastEnd { .. })
        ));
        assert_eq!(kv.len(1).unwrap(), 0);
        assert!(matches!(kv.len(2), Err(KvError::NoSuchSequence { .. })));
        kv.reset(0).unwrap();
        assert!(kv.is_empty());
    }
}
