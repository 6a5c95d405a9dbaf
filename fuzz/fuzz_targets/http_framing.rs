//! libFuzzer over `ankusa_fuzz_targets::http_framing` (what it checks is written there).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ankusa_fuzz_targets::http_framing::run(data));
