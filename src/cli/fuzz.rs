//! Fuzz-target bodies of this layer's decoders (see `crate::fuzzing`, the registry the
//! cargo-fuzz targets and `tests/it/fuzz_regressions.rs` call them through).

// ---------------------------------------------------------------------------------------------
// env_file

/// The `--env-file` decoder (`cli::env_file::parse`) over arbitrary bytes: never a panic; an
/// error names a line the input has; every entry has a valid name and a value without NUL or
/// newline; and the entries, written back one a line in single quotes (where the value has
/// none; else as they are, when that is accepted), read back as the same entries.
#[cfg(feature = "cli")]
pub fn env_file(data: &[u8]) {
    use crate::cli::env_file::parse;
    let entries = match parse(data) {
        Ok(entries) => entries,
        Err(e) => {
            let lines = data.split(|&b| b == b'\n').count();
            assert!(e.line >= 1 && e.line <= lines, "{e} of {lines} lines");
            return;
        }
    };
    let mut again = String::new();
    for (name, value) in &entries {
        let mut chars = name.chars();
        assert!(
            chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        );
        assert!(
            chars.all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "{name:?}"
        );
        assert!(!value.contains(['\n', '\0']), "{value:?}");
        if value.contains('\'') {
            again.push_str(&format!("{name}={value}\n"));
        } else {
            again.push_str(&format!("{name}='{value}'\n"));
        }
    }
    // A value holding a quote was read unquoted or in double quotes: as it is, it may read
    // differently (an opening quote); only a file of single-quotable values must come back.
    if entries
        .iter()
        .all(|(_, v)| !v.contains('\'') && !v.ends_with('\r'))
    {
        assert_eq!(parse(again.as_bytes()).as_ref(), Ok(&entries), "{again:?}");
    }
}
