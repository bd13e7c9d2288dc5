//! Stop strings over streamed text: text is released as soon as it can no longer be the start
//! of a stop string, and generation ends at the first stop string, which is not returned
//! (OpenAI's `stop`).

/// What to do with the text pushed so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopState {
    /// Send this text (possibly empty) and go on.
    Emit(String),
    /// A stop string matched: send this last text and stop.
    Stop(String),
}

/// Watches generated text for stop strings.
#[derive(Debug, Clone, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    /// Text not yet released (a suffix that may begin a stop string).
    held: String,
    /// The stop string that ended the generation (llama-server's `stopping_word`).
    pub matched: Option<String>,
}

impl StopMatcher {
    pub fn new(stops: Vec<String>) -> StopMatcher {
        StopMatcher {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            held: String::new(),
            matched: None,
        }
    }

    /// The stop string that matched (Anthropic's `stop_sequence`), once one did.
    pub fn matched(&self) -> Option<&str> {
        self.matched.as_deref()
    }

    /// Add generated text.
    pub fn push(&mut self, piece: &str) -> StopState {
        self.held.push_str(piece);
        let first = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()).map(|at| (at, s)))
            .min_by_key(|(at, _)| *at);
        if let Some((at, word)) = first {
            self.matched = Some(word.clone());
            let out = self.held[..at].to_string();
            self.held.clear();
            return StopState::Stop(out);
        }
        let keep = self.partial_suffix();
        let cut = self.held.len() - keep;
        let out = self.held[..cut].to_string();
        self.held.drain(..cut);
        StopState::Emit(out)
    }

    /// The held text at the end of generation (no stop string followed it).
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Bytes of the longest suffix of the held text that is a proper prefix of a stop string
    /// (always on a character boundary).
    fn partial_suffix(&self) -> usize {
        let h = &self.held;
        (1..=h.len())
            .rev()
            .filter(|&n| h.is_char_boundary(h.len() - n))
            .find(|&n| {
                let tail = &h[h.len() - n..];
                self.stops
                    .iter()
                    .any(|s| s.len() > n && s.starts_with(tail))
            })
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let mut m = StopMatcher::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = String::new();
        for p in pieces {
            match m.push(p) {
                StopState::Emit(t) => out.push_str(&t),
                StopState::Stop(t) => {
                    out.push_str(&t);
                    return (out, true);
                }
            }
        }
        out.push_str(&m.finish());
        (out, false)
    }

    #[test]
    fn stops_across_pieces_and_holds_partial_matches() {
        assert_eq!(run(&["\n\n"], &["a", "b\n", "\nc"]), ("ab".into(), true));
        assert_eq!(run(&["END"], &["xE", "N", "y"]), ("xENy".into(), false));
        assert_eq!(run(&["END"], &["xE", "ND"]), ("x".into(), true));
        assert_eq!(run(&[], &["a", "b"]), ("ab".into(), false));
        // The earliest of several stop strings wins, and is told.
        assert_eq!(run(&["cd", "b"], &["abcd"]), ("a".into(), true));
        let mut m = StopMatcher::new(vec!["cd".into(), "b".into()]);
        assert_eq!(m.matched(), None);
        m.push("abcd");
        assert_eq!(m.matched(), Some("b"));
    }

    #[test]
    fn releases_text_that_cannot_start_a_stop_string() {
        let mut m = StopMatcher::new(vec!["STOP".into()]);
        assert_eq!(m.push("hello S"), StopState::Emit("hello ".into()));
        assert_eq!(m.push("T"), StopState::Emit(String::new()));
        assert_eq!(m.push("x"), StopState::Emit("STx".into()));
        // Multi-byte characters are never split.
        let mut m = StopMatcher::new(vec!["é!".into()]);
        assert_eq!(m.push("aé"), StopState::Emit("a".into()));
        assert_eq!(m.push("b"), StopState::Emit("éb".into()));
    }
}
