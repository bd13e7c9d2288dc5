//! Which rows a batched step runs (continuous batching): every decoding sequence's next row
//! first, so running streams never wait on a long prompt, then prompt chunks in admission
//! order under what is left of the row budget (`-ub`), a chunk being cut where the budget ends.

/// What a sequence has to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Work {
    pub seq: usize,
    /// Prompt rows not run yet (0: the sequence decodes, one row a step).
    pub prompt_left: usize,
}

/// The rows of one step: `(seq, rows)`, decode rows first, then prompt chunks; `work` is in
/// admission order. Empty when nothing is to run or the budget is 0.
pub fn plan_step(work: &[Work], budget: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut left = budget;
    for w in work.iter().filter(|w| w.prompt_left == 0) {
        if left == 0 {
            return out;
        }
        out.push((w.seq, 1));
        left -= 1;
    }
    for w in work.iter().filter(|w| w.prompt_left > 0) {
        if left == 0 {
            break;
        }
        let rows = w.prompt_left.min(left);
        out.push((w.seq, rows));
        left -= rows;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(seq: usize, prompt_left: usize) -> Work {
        Work { seq, prompt_left }
    }

    #[test]
    fn decode_rows_first_then_prompt_chunks_under_the_budget() {
        let work = [w(2, 300), w(0, 0), w(1, 40), w(3, 0)];
        assert_eq!(plan_step(&work, 64), vec![(0, 1), (3, 1), (2, 62)]);
        assert_eq!(
            plan_step(&work, 400),
            vec![(0, 1), (3, 1), (2, 300), (1, 40)]
        );
        assert_eq!(plan_step(&work, 1), vec![(0, 1)]);
        assert_eq!(plan_step(&work, 0), vec![]);
        assert_eq!(plan_step(&[], 64), vec![]);
    }
}
