//! {{name}}: an Ankusa transform. It drops each hook whose body holds the
//! text of the `drop_when` option, and tags every other with the header
//! `x-transform: {{name}}`, its body unchanged.
//!
//! Options: `{"drop_when": "ping"}` (optional: without it, every hook
//! is kept).

use ankusa_sdk::{ConfigError, Failure, Hook, Outgoing, Transform, Verdict, export_transform, options};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    drop_when: Option<String>,
}

struct Tagger {
    drop_when: Option<String>,
}

impl Transform for Tagger {
    fn configure(json: &str) -> Result<Self, ConfigError> {
        let options: Options = options::parse(json)?;
        if options.drop_when.as_deref() == Some("") {
            return Err(ConfigError::field("drop_when", "an empty text would drop every hook"));
        }
        Ok(Tagger { drop_when: options.drop_when })
    }

    fn transform(&mut self, hook: Hook) -> Result<Verdict, Failure> {
        if let Some(text) = &self.drop_when
            && hook.body.windows(text.len()).any(|window| window == text.as_bytes())
        {
            return Ok(Verdict::Drop(format!("the body holds {text}")));
        }
        Ok(Verdict::Deliver(Outgoing {
            set_headers: vec![("x-transform".into(), b"{{name}}".to_vec())],
            ..Outgoing::unchanged()
        }))
    }
}

export_transform!(Tagger);
