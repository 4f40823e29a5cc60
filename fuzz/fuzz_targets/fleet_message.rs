#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| procjournal::fuzzing::fleet_message(data));
