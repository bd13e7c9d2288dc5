//! llama.cpp command lines on flint: every spelling llama.cpp's `common/arg.cpp` defines has an
//! entry in flint's table with the same number of values (the list in
//! `tests/data/llama_cpp/llama_cpp_flags.tsv` is extracted from llama.cpp's source, see the
//! README there), and each spelling of the table goes through the parser the binary uses
//! (`llama_args::normalize`, then clap): mapped onto the clap field of its long flag, noted
//! once, refused with its reason, or reported as typed. Then the cases a llama.cpp user hits
//! (`-sys`, `-cnv`, `-ngld`, `-mg 0`, `-hf`, `-p "-np"`, `--`), and a few runs of the binary for
//! the exit codes and stderr.

use std::collections::HashMap;
use std::ffi::OsString;
use std::process::Command;

use clap::parser::ValueSource;
use clap::{CommandFactory, Parser};
use flint::cli::llama_args::{lookup, normalize, ArgsError, Normalized};
use flint::cli::llama_table::{Action, Entry, BENCH, TABLE};
use flint::cli::{Cli, Command as Sub};

const RUN: &[&str] = &["generate", "chat", "serve", "plan", "tokenize", "bench"];

/// llama.cpp's spellings and how many values each takes, from the committed list.
fn llama_cpp_flags() -> Vec<(String, u8)> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/llama_cpp/llama_cpp_flags.tsv"
    );
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .map(|l| {
            let (s, n) = l.split_once('\t').unwrap();
            (s.to_string(), n.parse().unwrap())
        })
        .collect()
}

fn norm(words: &[&str]) -> Result<Normalized, ArgsError> {
    normalize(
        std::iter::once("flint")
            .chain(words.iter().copied())
            .map(OsString::from),
    )
}

/// The clap argument id of `long` (or one of its aliases) in subcommand `sub`, if it has one.
fn arg_id(sub: &str, long: &str) -> Option<String> {
    let mut root = Cli::command();
    root.build();
    let cmd = root.find_subcommand(sub)?;
    let bare = long.trim_start_matches("--");
    let id = cmd
        .get_arguments()
        .find(|a| {
            a.get_long() == Some(bare) || a.get_all_aliases().unwrap_or_default().contains(&bare)
        })
        .map(|a| a.get_id().to_string());
    id
}

/// A value clap accepts for `long`.
fn sample(long: &str) -> &'static str {
    match long {
        "--host" => "127.0.0.1",
        "--device" => "0",
        "--pg" => "1,1",
        "--chat-template" => "chatml",
        "--log-format" => "json",
        _ => "1",
    }
}

/// `flag` with `n` values after it, on `sub` (plan needs its -m).
fn line<'a>(sub: &'a str, flag: &'a str, n: u8, value: &'a str) -> Vec<&'a str> {
    let mut v = vec![sub];
    if sub == "plan" {
        v.extend(["-m", "x.gguf"]);
    }
    v.push(flag);
    v.extend(std::iter::repeat_n(value, n as usize));
    if sub == "bench" && (flag == "-npp" || flag == "-ntg") {
        v.extend(["-npl", "1"]); // clap: -npp and -ntg need -npl
    }
    v
}

#[test]
fn every_llama_cpp_spelling_is_in_the_table_with_its_values() {
    let flags = llama_cpp_flags();
    assert!(flags.len() > 500, "{} spellings", flags.len());
    let mut missing = Vec::new();
    for (s, n) in &flags {
        match lookup("generate", s) {
            Some(e) => assert_eq!(e.values, *n, "{s}: llama.cpp takes {n} values"),
            None => missing.push(s.clone()),
        }
    }
    assert!(missing.is_empty(), "not in flint's table: {missing:?}");
    // A spelling mapped to a flint flag that llama.cpp also spells maps from that very flag's
    // entry (`-c` → `--ctx-size` because llama.cpp's `-c` is `--ctx-size`).
    let llama: HashMap<&str, u8> = flags.iter().map(|(s, n)| (s.as_str(), *n)).collect();
    for e in TABLE {
        if let Action::Map(long) = e.action {
            if llama.contains_key(long) {
                assert!(
                    e.spellings.contains(&long),
                    "{:?} mapped to {long}",
                    e.spellings
                );
            }
        }
    }
    // No spelling twice in the table (a lookup would hide the second).
    let mut seen = HashMap::new();
    for e in TABLE {
        for s in e.spellings {
            assert!(seen.insert(*s, ()).is_none(), "{s} twice in the table");
        }
    }
}

/// Runs one entry's spellings on `sub` and checks the outcome its action promises.
fn check_entry(e: &Entry, spelling: &str, sub: &str) {
    match e.action {
        Action::Map(long) | Action::MapWith(long, _) => {
            let value = match e.action {
                Action::MapWith(_, v) => v,
                _ => sample(long),
            };
            let words = line(sub, spelling, e.values, sample(long));
            let Some(id) = arg_id(sub, long) else {
                // Fields another part of flint adds (-hf, -v): the mapping is what is held.
                assert_eq!(
                    norm(&words),
                    Err(ArgsError::NotForCommand {
                        flag: spelling.into(),
                        long: long.into(),
                        command: sub.into(),
                    }),
                    "{spelling} on {sub}"
                );
                return;
            };
            let n = norm(&words).unwrap_or_else(|err| panic!("{spelling} on {sub}: {err}"));
            let want: OsString = if e.values == 0 && matches!(e.action, Action::Map(_)) {
                long.into()
            } else {
                format!("{long}={value}").into()
            };
            assert!(n.args.contains(&want), "{spelling}: {:?}", n.args);
            if long == "--help" {
                return;
            }
            // `--hf-file` names a file of the `--hf-repo` repository, so clap requires both.
            let mut args = n.args.clone();
            if long == "--hf-file" {
                args.push("--hf-repo=user/repo".into());
            }
            let m = Cli::command()
                .try_get_matches_from(&args)
                .unwrap_or_else(|err| panic!("{spelling} on {sub}: {err}"));
            let (_, sm) = m.subcommand().unwrap();
            assert_eq!(
                sm.value_source(&id),
                Some(ValueSource::CommandLine),
                "{spelling} on {sub} does not set {id}"
            );
        }
        Action::Note(why) => {
            let words = line(sub, spelling, e.values, "1");
            let n = norm(&words).unwrap_or_else(|err| panic!("{spelling}: {err}"));
            assert_eq!(n.notes, vec![format!("{spelling}: {why} (ignored)")]);
            assert!(
                !n.args.iter().any(|a| a == spelling),
                "{spelling} passed on"
            );
            assert_eq!(n.args.len(), words.len() + 1 - 1 - e.values as usize);
        }
        Action::Refuse(why) => {
            let words = line(sub, spelling, e.values, "1");
            assert_eq!(
                norm(&words),
                Err(ArgsError::Refused {
                    flag: spelling.into(),
                    reason: why.into(),
                })
            );
        }
        Action::Conversation(want) => {
            let (noted, refused) = if want {
                ("chat", "generate")
            } else {
                ("generate", "chat")
            };
            let n = norm(&[noted, spelling]).unwrap();
            assert_eq!(n.notes.len(), 1, "{spelling}");
            assert!(matches!(
                norm(&[refused, spelling]),
                Err(ArgsError::Refused { .. })
            ));
        }
    }
}

#[test]
fn each_spelling_goes_through_the_parser() {
    for e in TABLE {
        for s in e.spellings {
            // A command that has the mapped flag, else generate.
            let sub = match e.action {
                Action::Map(long) | Action::MapWith(long, _) => RUN
                    .iter()
                    .copied()
                    .filter(|c| lookup(c, s).map(|x| x.action) == Some(e.action))
                    .find(|c| arg_id(c, long).is_some())
                    .unwrap_or("generate"),
                _ => "generate",
            };
            check_entry(e, s, sub);
        }
    }
    for e in BENCH {
        for s in e.spellings {
            check_entry(e, s, "bench");
        }
    }
}

fn parse(words: &[&str]) -> Cli {
    Cli::try_parse_from(norm(words).unwrap().args).unwrap()
}

#[test]
fn the_cases_llama_cpp_users_hit() {
    // -sys is the system prompt, not a bad --seed.
    let Sub::Generate(g) = parse(&["generate", "-sys", "be brief", "-p", "hi"]).command else {
        panic!()
    };
    assert_eq!(g.opts.system_prompt.as_deref(), Some("be brief"));
    assert_eq!(g.model.seed, None);
    // A value that looks like a flag stays a value.
    let Sub::Generate(g) = parse(&["generate", "-p", "-np", "-n", "-1"]).command else {
        panic!()
    };
    assert_eq!(g.prompt.as_deref(), Some("-np"));
    assert_eq!(g.n_predict, -1);
    // After `--` nothing is rewritten or checked.
    let n = norm(&["generate", "-p", "x", "--", "-np", "-ngl"]).unwrap();
    assert_eq!(&n.args[n.args.len() - 3..], ["--", "-np", "-ngl"]);
    // -ngld and -ngl: noted once each, their values consumed.
    let n = norm(&[
        "generate", "-ngld", "99", "-ngl", "99", "-ngl", "99", "-p", "x",
    ])
    .unwrap();
    assert_eq!(n.notes.len(), 2, "{:?}", n.notes);
    assert_eq!(n.args, ["flint", "generate", "--prompt=x"]);
    // -cnv: chat is a conversation; generate points there.
    assert_eq!(norm(&["chat", "-cnv"]).unwrap().notes.len(), 1);
    assert!(
        matches!(norm(&["generate", "-cnv"]), Err(ArgsError::Refused { ref reason, .. }) if reason.contains("flint chat"))
    );
    // -mg 0: refused (one adapter; -dev chooses it), not `--model` twice.
    assert!(
        matches!(norm(&["generate", "-mg", "0"]), Err(ArgsError::Refused { ref reason, .. }) if reason.contains("-dev"))
    );
    // -hf: the hub's --hf-repo, never help.
    let hf = lookup("generate", "-hf").unwrap();
    assert_eq!(hf.action, Action::Map("--hf-repo"));
    match norm(&["generate", "-hf", "user/repo:Q4_K_M"]) {
        Ok(n) => assert!(n.args.contains(&"--hf-repo=user/repo:Q4_K_M".into())),
        Err(e) => {
            assert!(matches!(e, ArgsError::NotForCommand { ref long, .. } if long == "--hf-repo"))
        }
    }
    // Unknown flags as typed, never split into letters.
    for bad in ["-foo", "-sysx", "--no-such-flag", "-c4096"] {
        assert_eq!(
            norm(&["generate", bad]),
            Err(ArgsError::Unknown {
                flag: bad.into(),
                command: "generate".into()
            })
        );
    }
    // llama.cpp reads `_` as `-` in long flags; `--flag=value` works.
    let Sub::Serve(s) = parse(&["serve", "--ctx_size", "8192", "-np", "4", "--port=0"]).command
    else {
        panic!()
    };
    assert_eq!((s.model.n_ctx, s.n_parallel, s.port), (Some(8192), 4, 0));
    // bench follows llama-bench: -p/-n are lengths, -r repetitions.
    let Sub::Bench(b) = parse(&["bench", "-p", "16", "-n", "8", "-r", "2", "-ngl", "99"]).command
    else {
        panic!()
    };
    assert_eq!(
        (b.n_prompt, b.n_gen, b.repetitions),
        (vec![16], Some(vec![8]), 2)
    );
    // Subcommands without llama.cpp flags report them as typed.
    assert!(matches!(
        norm(&["info", "-ngl", "1"]),
        Err(ArgsError::Unknown { .. })
    ));
    // Missing values are named.
    assert!(matches!(
        norm(&["generate", "-ngl"]),
        Err(ArgsError::MissingValue { .. })
    ));
}

fn flint(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(args)
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .env("HF_ENDPOINT", "http://127.0.0.1:9")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_binary_exits_2_naming_the_flag_as_typed() {
    let (code, err) = flint(&["generate", "-sysx", "hi"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("'-sysx'") && !err.contains("--seed"), "{err}");
    // The target's -ot is taken (docs/LLAMA_CPP.md); the drafter's is refused by name.
    let (code, err) = flint(&["generate", "-otd", "exps=CPU", "-p", "x"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("-otd") && err.contains("host memory"), "{err}");
    // -hf never prints help and exits 0 (the hub, where it runs, is unreachable here).
    let (code, err) = flint(&["generate", "-hf", "u/r:Q4_K_M", "-p", "x", "-n", "1"]);
    assert_ne!(code, 0, "{err}");
    // Notes: once per flag, on stderr, and the command goes on (here: --help).
    let (code, err) = flint(&["generate", "-ngl", "99", "-t", "8", "-ngl", "99", "--help"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(err.matches("-ngl:").count(), 1, "{err}");
    assert_eq!(err.matches("-t:").count(), 1, "{err}");
}

#[test]
fn a_speculative_type_flint_cannot_honour_is_refused_by_name() {
    // With no drafter at all, the type alone must not be ignored (a plain decode would look
    // like speculation).
    let model = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/models/SmolLM2-135M-Instruct.Q4_1.gguf"
    );
    for ty in ["draft-eagle3", "ngram-simple", "bogus"] {
        let gen = [
            "generate",
            "-m",
            model,
            "--spec-type",
            ty,
            "-p",
            "x",
            "-n",
            "1",
        ];
        let chat = ["chat", "-m", model, "--spec-type", ty];
        for line in [&gen[..], &chat[..]] {
            let (code, err) = flint(line);
            assert_eq!(code, 2, "{line:?}: {err}");
            assert!(err.contains(&format!("--spec-type {ty}")), "{err}");
        }
    }
    // draft-mtp is honoured only where the file has an MTP block.
    let (code, err) = flint(&[
        "generate",
        "-m",
        model,
        "--spec-type",
        "draft-mtp",
        "-p",
        "x",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("nextn_predict_layers"), "{err}");
}

#[test]
fn dev_takes_an_index_or_a_part_of_one_adapter_name() {
    use flint::cli::devices::choose_adapter;
    let adapters = vec![
        (0, "NVIDIA GeForce RTX 4070".to_string()),
        (1, "Intel(R) UHD Graphics 770".to_string()),
        (2, "llvmpipe (LLVM 15.0.6, 256 bits)".to_string()),
    ];
    assert_eq!(choose_adapter("1", &adapters).unwrap(), 1);
    assert_eq!(choose_adapter("rtx", &adapters).unwrap(), 0);
    assert_eq!(choose_adapter("Intel", &adapters).unwrap(), 1);
    for (bad, says) in [("amd", "no adapter"), ("l", "names 2 adapters")] {
        let err = choose_adapter(bad, &adapters).unwrap_err().to_string();
        assert!(err.contains(says) && err.contains("0: NVIDIA"), "{err}");
    }
}

#[test]
fn reverse_prompts_are_found_across_tokens() {
    use flint::cli::prompt_args::StopStrings;
    let mut s = StopStrings::new(vec!["User:".into()]);
    assert!(!s.push("Sure. Us"));
    assert!(!s.push("e"));
    assert!(s.push("r: "));
    s.reset();
    assert!(!s.push("r: "));
    assert!(!StopStrings::new(vec![]).push("anything"));
}

#[test]
fn the_prompt_comes_from_p_then_f_then_a_piped_stdin() {
    use flint::cli::prompt_args::prompt_text;
    use std::path::Path;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("prompt.txt");
    std::fs::write(&file, "from a file").unwrap();
    assert_eq!(prompt_text(Some("typed"), None, true).unwrap(), "typed");
    assert_eq!(prompt_text(None, Some(&file), true).unwrap(), "from a file");
    let err = prompt_text(None, None, true).unwrap_err().to_string();
    assert!(err.contains("-p") && err.contains("-f"), "{err}");
    assert!(prompt_text(None, Some(Path::new("/no/such/file")), true).is_err());
    // The binary: no -p with an empty stdin (not a terminal) is refused before any model loads.
    let (code, err) = flint(&["generate", "-m", "no-such-model.gguf"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("stdin was empty"), "{err}");
}
