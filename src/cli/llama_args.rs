//! llama.cpp command lines on flint: the words of a command line are read before clap, in
//! flag position only (a flag's values and everything after `--` pass untouched), against
//! [`super::llama_table`] for the run commands (`generate`, `chat`, `serve`, `plan`, `bench`,
//! `tokenize`). A llama.cpp spelling becomes flint's long flag, is dropped with a note, or is
//! refused with its reason; a word that is neither in the table nor one of the subcommand's own
//! flags is reported as typed ([`ArgsError::Unknown`]), where clap would have split `-sys` into
//! `-s -y -s`. What flags a subcommand has, and which take a value, is read from clap itself.
//! A value is handed to clap joined to its flag (`--prompt=-np`), so clap never takes a value
//! that starts with `-` for a flag. As llama.cpp does, `_` in a `--` flag's name reads as `-`.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;

use clap::CommandFactory;

use super::llama_table::{Action, Entry, BENCH, TABLE};

/// A command line flint refuses before clap sees it (exit code 2, like clap's usage errors).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgsError {
    #[error("unknown flag '{flag}' for flint {command} (flint {command} --help lists its flags)")]
    Unknown { flag: String, command: String },
    #[error("{flag}: not supported by flint: {reason}")]
    Refused { flag: String, reason: String },
    #[error("{flag} ({long} on flint) does not apply to flint {command}")]
    NotForCommand {
        flag: String,
        long: String,
        command: String,
    },
    #[error("{flag} takes {needed} value(s), {given} given")]
    MissingValue {
        flag: String,
        needed: u8,
        given: usize,
    },
}

/// A command line ready for clap, and the notes to print once each on stderr.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Normalized {
    pub args: Vec<OsString>,
    pub notes: Vec<String>,
}

/// The subcommands whose flags follow llama.cpp's (the others take only their own flags).
const RUN_COMMANDS: &[&str] = &["generate", "chat", "serve", "plan", "bench", "tokenize"];

/// The table entry of `spelling` for `command` (`bench` reads llama-bench's spellings first).
pub fn lookup(command: &str, spelling: &str) -> Option<&'static Entry> {
    let bench: &[Entry] = if command == "bench" { BENCH } else { &[] };
    bench
        .iter()
        .chain(TABLE)
        .find(|e| e.spellings.contains(&spelling))
}

/// The flags a clap command takes: long and short names, and whether each takes a value.
struct Known {
    long: HashMap<String, bool>,
    short: HashMap<char, (Option<String>, bool)>,
}

impl Known {
    fn of(cmd: &clap::Command) -> Known {
        let mut k = Known {
            long: HashMap::new(),
            short: HashMap::new(),
        };
        for a in cmd.get_arguments() {
            if a.is_positional() {
                continue;
            }
            let takes = a.get_action().takes_values();
            let long = a.get_long().map(str::to_string);
            for l in long.iter().cloned().chain(
                a.get_all_aliases()
                    .unwrap_or_default()
                    .into_iter()
                    .map(String::from),
            ) {
                k.long.insert(l, takes);
            }
            for s in a
                .get_short()
                .into_iter()
                .chain(a.get_all_short_aliases().unwrap_or_default())
            {
                k.short.insert(s, (long.clone(), takes));
            }
        }
        k
    }
}

/// Rewrite a whole command line (`argv[0]` first) for clap; see the module header.
pub fn normalize(args: impl IntoIterator<Item = OsString>) -> Result<Normalized, ArgsError> {
    let mut root = super::Cli::command();
    root.build();
    let mut words = args.into_iter();
    let mut out: Vec<OsString> = words.next().into_iter().collect();
    let mut notes = Vec::new();
    let mut seen = HashSet::new();
    let mut cmd = &root;
    let mut name = String::new();
    let mut known = Known::of(cmd);
    let mut rest: std::collections::VecDeque<OsString> = words.collect();
    while let Some(word) = rest.pop_front() {
        let Some(s) = word.to_str().map(str::to_string) else {
            out.push(word);
            continue;
        };
        if s == "--" {
            out.push(word);
            out.extend(rest.drain(..));
            break;
        }
        if !s.starts_with('-') || s == "-" {
            // A positional word; a subcommand's name descends into it.
            if let Some(sub) = cmd.find_subcommand(&s) {
                cmd = sub;
                name = if name.is_empty() {
                    sub.get_name().to_string()
                } else {
                    format!("{name} {}", sub.get_name())
                };
                known = Known::of(cmd);
            }
            out.push(word);
            continue;
        }
        let (flag, inline) = match s.strip_prefix("--") {
            Some(body) => match body.split_once('=') {
                Some((n, v)) => (format!("--{}", n.replace('_', "-")), Some(v.to_string())),
                None => (format!("--{}", body.replace('_', "-")), None),
            },
            None => (s.clone(), None),
        };
        let top = name.split(' ').next().unwrap_or_default();
        let entry = if RUN_COMMANDS.contains(&top) {
            lookup(top, &flag)
        } else {
            None
        };
        if let Some(entry) = entry {
            let mut values: Vec<String> = inline.into_iter().collect();
            while values.len() < entry.values as usize {
                match rest.pop_front() {
                    Some(v) => values.push(v.to_string_lossy().into_owned()),
                    None => {
                        return Err(ArgsError::MissingValue {
                            flag,
                            needed: entry.values,
                            given: values.len(),
                        })
                    }
                }
            }
            if let Some(note) = apply(entry.action, &flag, values, &name, &known, &mut out)? {
                if seen.insert(flag.clone()) {
                    notes.push(note);
                }
            }
            continue;
        }
        // One of the subcommand's own flags (or clap's, before the subcommand).
        let own = if let Some(long) = flag.strip_prefix("--") {
            known.long.get(long).map(|&t| (Some(long.to_string()), t))
        } else {
            let mut chars = flag.chars().skip(1);
            match (chars.next(), chars.next()) {
                (Some(c), None) => known.short.get(&c).cloned(),
                _ => None,
            }
        };
        match own {
            Some((long, true)) if inline.is_none() => {
                let flag_word = long.map_or_else(|| flag.clone(), |l| format!("--{l}"));
                match rest.pop_front() {
                    Some(v) => out.push(joined(&flag_word, v)),
                    None => out.push(word),
                }
            }
            Some(_) => out.push(word),
            None if name.is_empty() => out.push(word),
            None => {
                return Err(ArgsError::Unknown {
                    flag: s.split('=').next().unwrap_or_default().to_string(),
                    command: name,
                })
            }
        }
    }
    Ok(Normalized { args: out, notes })
}

/// `--flag=value` as one word (a value may be anything, `-np` or not UTF-8 included).
fn joined(flag: &str, value: OsString) -> OsString {
    let mut w = OsString::from(format!("{flag}="));
    w.push(value);
    w
}

/// Carry out `action` for `flag` and its `values`: words for clap, or the note to print.
fn apply(
    action: Action,
    flag: &str,
    values: Vec<String>,
    command: &str,
    known: &Known,
    out: &mut Vec<OsString>,
) -> Result<Option<String>, ArgsError> {
    let map = |long: &str, out: &mut Vec<OsString>, values: Vec<String>| {
        let bare = long.trim_start_matches("--");
        if !known.long.contains_key(bare) {
            return Err(ArgsError::NotForCommand {
                flag: flag.to_string(),
                long: long.to_string(),
                command: command.to_string(),
            });
        }
        match values.as_slice() {
            [] => out.push(long.into()),
            [v] => out.push(joined(long, v.into())),
            more => {
                out.push(long.into());
                out.extend(more.iter().map(OsString::from));
            }
        }
        Ok(None)
    };
    let refuse = |reason: &str| {
        Err(ArgsError::Refused {
            flag: flag.to_string(),
            reason: reason.to_string(),
        })
    };
    match action {
        Action::Map(long) => map(long, out, values),
        Action::MapWith(long, value) => map(long, out, vec![value.to_string()]),
        Action::Note(why) => Ok(Some(format!("{flag}: {why} (ignored)"))),
        Action::Refuse(why) => refuse(why),
        Action::Conversation(want) => match (want, command == "chat") {
            (true, true) => Ok(Some(format!(
                "{flag}: flint chat is a conversation (ignored)"
            ))),
            (false, false) => Ok(Some(format!(
                "{flag}: flint {command} is not a conversation (ignored)"
            ))),
            (true, false) => refuse("conversation mode is flint chat"),
            (false, true) => {
                refuse("flint chat is a conversation; flint generate completes one prompt")
            }
        },
    }
}
