//! Pre-tokenizers for byte-level BPE: the regexes llama.cpp applies (`llm_tokenizer_bpe`) per
//! `tokenizer.ggml.pre`, and the split that runs them.
//!
//! As in llama.cpp's `unicode_regex_split`, the patterns of one pre-tokenizer run in order: each
//! splits every piece the previous one produced into its matches *and* the unmatched gaps
//! between them (a gap is a piece too). Each piece is matched on its own, so its ends act as
//! the text's ends for look-aheads such as `\s+(?!\S)`. llama.cpp hand-codes the GPT-2 and
//! Llama 3 patterns and runs the others through `std::regex` on category-collapsed text; both
//! are equivalent to running the pattern itself with Unicode classes, which is what we do.

use std::ops::Range;

use fancy_regex::Regex;

use super::error::TokenizerError;

/// GPT-2's pattern (also the second half of StarCoder's and the default).
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
/// Llama 3's pattern with `(?i:…)` spelled out, as llama.cpp adapts it.
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2's: Llama 3's with single digits.
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen3.5 / Qwen3.6 (llama.cpp's `qwen35`): Qwen2's with combining marks (`\p{M}`) counted as
/// letters in words and kept out of punctuation runs, so a mark stays with the letter before it.
const QWEN35: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// GPT-4o / Llama 4 (case runs through look-aheads, as llama.cpp adapts the original).
const GPT4O: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Mistral's Tekken.
const TEKKEN: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";

const P_DEFAULT: &[&str] = &[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"];
const P_FALCON: &[&str] = &[r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]"];
const P_GPT2: &[&str] = &[GPT2];
const P_STARCODER: &[&str] = &[r"\p{N}", GPT2];
const P_LLAMA3: &[&str] = &[LLAMA3];
const P_QWEN2: &[&str] = &[QWEN2];
const P_QWEN35: &[&str] = &[QWEN35];
const P_GPT4O: &[&str] = &[GPT4O];
const P_TEKKEN: &[&str] = &[TEKKEN];

/// What a `tokenizer.ggml.pre` value selects: its patterns and the flags llama.cpp ties to it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PreSpec {
    /// The canonical name (llama.cpp's pre-type) for messages and docs.
    pub kind: &'static str,
    pub patterns: &'static [&'static str],
    /// Emit a whole word as one token when the vocabulary has it, before merging (Llama 3).
    pub ignore_merges: bool,
    /// Default for `add_bos_token` when the metadata does not say.
    pub add_bos: bool,
    /// llama.cpp's `clean_spaces` for this pre-tokenizer.
    pub clean_spaces: bool,
    /// The model has no BOS token (chatglm4).
    pub no_bos: bool,
}

const fn spec(kind: &'static str, patterns: &'static [&'static str], clean: bool) -> PreSpec {
    PreSpec {
        kind,
        patterns,
        ignore_merges: false,
        add_bos: false,
        clean_spaces: clean,
        no_bos: false,
    }
}

/// The pre-tokenizer for a `tokenizer.ggml.pre` value (absent: `default`, as llama.cpp does
/// with a warning). `None` when flint does not know it.
pub(crate) fn lookup(pre: Option<&str>) -> Option<PreSpec> {
    let llama3 = PreSpec {
        ignore_merges: true,
        add_bos: true,
        ..spec("llama3", P_LLAMA3, true)
    };
    Some(match pre.unwrap_or("default") {
        "default" => spec("default", P_DEFAULT, true),
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
        | "lfm2" | "jina-v5-nano" => llama3,
        "dbrx" | "smaug-bpe" => spec("llama3", P_LLAMA3, true),
        "chatglm-bpe" | "glm4" => PreSpec {
            no_bos: true,
            ..spec("chatglm4", P_LLAMA3, true)
        },
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" => spec("qwen2", P_QWEN2, false),
        "stablelm2" | "megrez" => spec("qwen2", P_QWEN2, true),
        "qwen35" => spec("qwen35", P_QWEN35, false),
        "smollm" | "command-r" => spec("starcoder", P_STARCODER, false),
        "starcoder" | "refact" | "codeshell" | "exaone" | "minerva-7b" | "mellum2" => {
            spec("starcoder", P_STARCODER, true)
        }
        "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es" | "jina-v2-de"
        | "a.x-4.0" | "mellum" | "modern-bert" | "exaone4" | "mpt" | "olmo" | "jais" => {
            spec("gpt2", P_GPT2, true)
        }
        "trillion" | "granite-docling" => spec("gpt2", P_GPT2, false),
        "falcon" => spec("falcon", P_FALCON, true),
        "gpt-4o" | "llama4" | "kanana2" | "talkie" => spec("gpt4o", P_GPT4O, false),
        "tekken" => PreSpec {
            ignore_merges: true,
            add_bos: true,
            ..spec("tekken", P_TEKKEN, false)
        },
        _ => return None,
    })
}

/// A compiled pre-tokenizer.
#[derive(Debug, Clone)]
pub(crate) struct PreTokenizer {
    regexes: Vec<(Regex, &'static str)>,
}

/// Backtracking budget per match attempt; the patterns above need a handful per character,
/// so only adversarial look-ahead chains could reach it, and they then fail with an error.
const BACKTRACK_LIMIT: usize = 10_000_000;

impl PreTokenizer {
    pub(crate) fn new(patterns: &[&'static str]) -> Result<PreTokenizer, TokenizerError> {
        let regexes = patterns
            .iter()
            .map(|&p| {
                fancy_regex::RegexBuilder::new(p)
                    .backtrack_limit(BACKTRACK_LIMIT)
                    .build()
                    .map(|r| (r, p))
                    .map_err(|e| TokenizerError::Regex {
                        pattern: p.to_string(),
                        message: e.to_string(),
                    })
            })
            .collect::<Result<_, _>>()?;
        Ok(PreTokenizer { regexes })
    }

    /// Split `text` into word byte ranges (never empty, covering the text in order).
    pub(crate) fn split(&self, text: &str) -> Result<Vec<Range<usize>>, TokenizerError> {
        let mut words: Vec<Range<usize>> = Vec::new();
        if !text.is_empty() {
            words.push(0..text.len());
        }
        for (re, pattern) in &self.regexes {
            let mut next = Vec::with_capacity(words.len() * 2);
            for w in words {
                let piece = text.get(w.clone()).unwrap_or_default();
                let mut last = 0;
                for m in re.find_iter(piece) {
                    let m = m.map_err(|e| TokenizerError::Regex {
                        pattern: pattern.to_string(),
                        message: e.to_string(),
                    })?;
                    if m.start() > last {
                        next.push(w.start + last..w.start + m.start());
                    }
                    if m.end() > m.start() {
                        next.push(w.start + m.start()..w.start + m.end());
                    }
                    last = m.end();
                }
                if last < piece.len() {
                    next.push(w.start + last..w.end);
                }
            }
            words = next;
        }
        Ok(words)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(pre: &str, text: &str) -> Vec<String> {
        let spec = lookup(Some(pre)).unwrap();
        let p = PreTokenizer::new(spec.patterns).unwrap();
        p.split(text)
            .unwrap()
            .into_iter()
            .map(|r| text[r].to_string())
            .collect()
    }

    #[test]
    fn every_pattern_compiles() {
        for pre in [
            "default", "llama3", "qwen2", "qwen35", "smollm", "gpt-2", "falcon", "gpt-4o", "tekken",
        ] {
            let spec = lookup(Some(pre)).unwrap();
            PreTokenizer::new(spec.patterns).unwrap();
        }
        assert!(lookup(Some("no-such-pre")).is_none());
    }

    // Expected splits derived by hand from the patterns (leftmost alternative wins).
    #[test]
    fn gpt2_and_starcoder_splits() {
        assert_eq!(
            split("gpt-2", "Hello  world's 123"),
            ["Hello", " ", " world", "'s", " 123"]
        );
        assert_eq!(split("gpt-2", "a\nb   "), ["a", "\n", "b", "   "]);
        // StarCoder/SmolLM: every digit alone, and the space before a number stands alone.
        assert_eq!(split("smollm", "x 3.14"), ["x", " ", "3", ".", "1", "4"]);
    }

    #[test]
    fn llama3_and_qwen2_splits() {
        assert_eq!(
            split("llama3", "Hello world 12345"),
            ["Hello", " world", " ", "123", "45"]
        );
        assert_eq!(
            split("llama3", "I'M ok\n\n  x"),
            ["I", "'M", " ok", "\n\n", " ", " x"]
        );
        assert_eq!(split("llama3", "(a) ...\n"), ["(a", ")", " ...\n"]);
        assert_eq!(split("qwen2", "ab 12"), ["ab", " ", "1", "2"]);
    }

    #[test]
    fn qwen35_keeps_combining_marks_with_letters() {
        let spec = lookup(Some("qwen35")).unwrap();
        assert_eq!((spec.kind, spec.clean_spaces), ("qwen35", false));
        assert!(!spec.ignore_merges && !spec.add_bos);
        // Without marks it splits as Qwen2 does.
        assert_eq!(
            split("qwen35", "ab 12 I'M"),
            ["ab", " ", "1", "2", " I", "'M"]
        );
        // A decomposed accent stays in its word; Qwen2 cuts the word at the mark.
        let cafe = "cafe\u{301} ok";
        assert_eq!(split("qwen35", cafe), ["cafe\u{301}", " ok"]);
        assert_eq!(split("qwen2", cafe), ["cafe", "\u{301}", " ok"]);
        // Vietnamese, decomposed: base letters and their stacked marks form one word.
        let viet = "Tie\u{302}\u{301}ng Vie\u{323}\u{302}t";
        assert_eq!(
            split("qwen35", viet),
            ["Tie\u{302}\u{301}ng", " Vie\u{323}\u{302}t"]
        );
        // Devanagari vowel signs and viramas are marks: one word per space-separated word.
        assert_eq!(split("qwen35", "नमस्ते दुनिया"), ["नमस्ते", " दुनिया"]);
        assert_eq!(split("qwen2", "नमस्ते"), ["नमस", "\u{94d}त", "\u{947}"]);
        // A mark with no letter before it: a leading mark is a word, a mark after a digit or a
        // symbol starts a word (`[^\r\n\p{L}\p{N}]?` takes the symbol, not the digit).
        assert_eq!(split("qwen35", "\u{301}x"), ["\u{301}x"]);
        assert_eq!(split("qwen35", "7\u{301}"), ["7", "\u{301}"]);
        assert_eq!(
            split("qwen35", "\u{2764}\u{fe0f}!"),
            ["\u{2764}\u{fe0f}", "!"]
        );
    }
}
