//! A transform for the host's tests: what it does to each hook is its
//! `mode` option, or the hook's `x-misbehave` header when it has one.
//!
//! Modes: `pass` (deliver unchanged), `drop`, `trap`, `loop` (spin until
//! the host's deadline), `alloc` (grow memory past any cap), `bad-header`
//! (set a header with an invalid name), `host-header` (set an
//! `x-ankusa-*` header), `transient`, `permanent`, `tag` (append
//! `options.tag` to the body and set `x-tag`).

use ankusa_sdk::{ConfigError, Failure, Hook, Outgoing, Transform, Verdict, export_transform, options};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    #[serde(default = "pass")]
    mode: String,
    #[serde(default)]
    tag: String,
}

fn pass() -> String {
    "pass".into()
}

struct Misbehave(Options);

impl Transform for Misbehave {
    fn configure(json: &str) -> Result<Self, ConfigError> {
        Ok(Misbehave(options::parse(json)?))
    }

    fn transform(&mut self, hook: Hook) -> Result<Verdict, Failure> {
        let mode = match hook.header("x-misbehave") {
            Some(mode) => String::from_utf8_lossy(mode).into_owned(),
            None => self.0.mode.clone(),
        };
        match mode.as_str() {
            "drop" => Ok(Verdict::Drop(format!("dropped {}", hook.id))),
            "trap" => std::process::abort(),
            "loop" => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            "alloc" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "bad-header" => Ok(Verdict::Deliver(Outgoing {
                set_headers: vec![("bad header".into(), b"x".to_vec())],
                ..Outgoing::unchanged()
            })),
            "host-header" => Ok(Verdict::Deliver(Outgoing {
                set_headers: vec![("x-ankusa-previous-dead".into(), b"forged".to_vec())],
                ..Outgoing::unchanged()
            })),
            "transient" => Err(Failure::transient("the transform asked for a retry")),
            "permanent" => Err(Failure::permanent("the transform refused the hook")),
            "tag" => {
                let mut body = hook.body;
                body.extend_from_slice(self.0.tag.as_bytes());
                Ok(Verdict::Deliver(Outgoing {
                    set_headers: vec![("x-tag".into(), self.0.tag.clone().into_bytes())],
                    ..Outgoing::body(body)
                }))
            }
            _ => Ok(Verdict::Deliver(Outgoing::unchanged())),
        }
    }
}

export_transform!(Misbehave);
