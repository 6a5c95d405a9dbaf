//! The config loader: any YAML text and environment (for `${VAR}` and the
//! `ANKUSA_*` overrides) gives a configuration or a list of problems,
//! never a panic; a loaded configuration prints and loads again the same.
//!
//! Input: the YAML text, then (after a NUL byte) `NAME=value` lines of the
//! environment.

use std::collections::BTreeMap;

pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (yaml, env) = text.split_once('\0').unwrap_or((text, ""));
    let env: BTreeMap<String, String> =
        env.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect();
    match ankusa::config::load_str(yaml, "fuzz.yml", &env) {
        Ok(config) => {
            // What print-config writes loads back to the same thing (a
            // literal `${` would be read as a variable the second time).
            let printed = serde_json::to_string(&config).expect("a loaded config serializes");
            if printed.contains("${") {
                return;
            }
            match ankusa::config::load_str(&printed, "printed", &BTreeMap::new()) {
                Ok(again) => assert!(again == config, "printed and loaded back, it differs: {printed}"),
                Err(error) => panic!("a loaded config does not load back: {printed}\n{error}"),
            }
        }
        Err(error) => assert!(!error.problems().is_empty() || !error.to_string().is_empty()),
    }
}
