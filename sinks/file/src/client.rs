//! Appending one line to the sink's file through `wasi:filesystem`.
//!
//! The file is opened anew for every line, so a file renamed away (log
//! rotation) is followed by a fresh one. With `max_bytes`, the sink rotates
//! it itself: a line that would take the file past the limit first renames
//! it to `<file>.<unix ms>` (never over an existing name). A line goes out
//! in as few appends as the host permits (64 KiB each), each one an
//! `O_APPEND` write of its own; with one delivery at a time (the sink's
//! default concurrency) no other line can land between them.

use crate::bindings::wasi::filesystem::preopens::get_directories;
use crate::bindings::wasi::filesystem::types::{Descriptor, DescriptorFlags, OpenFlags, PathFlags};
use crate::bindings::wasi::io::streams::StreamError;
use ankusa_sdk::Failure;

use crate::classify::fs_failure;
use std::time::{SystemTime, UNIX_EPOCH};

pub fn append(path: &str, line: &[u8], fsync: bool, max_bytes: Option<u64>) -> Result<(), Failure> {
    let directory = directory()?;
    let open = || {
        directory
            .open_at(PathFlags::empty(), path, OpenFlags::CREATE, DescriptorFlags::WRITE)
            .map_err(|code| fs_failure(&format!("opening `{path}`"), code))
    };
    let mut file = open()?;
    let size = |file: &Descriptor| {
        file.stat().map(|stat| stat.size).map_err(|code| fs_failure(&format!("reading the size of `{path}`"), code))
    };
    let mut before = if fsync || max_bytes.is_some() { size(&file)? } else { 0 };
    if max_bytes.is_some_and(|max| before > 0 && before + line.len() as u64 > max) {
        rotate(&directory, path)?;
        file = open()?;
        before = size(&file)?;
    }
    write_all(&file, line).map_err(|reason| Failure::transient(format!("appending to `{path}`: {reason}")))?;
    if fsync {
        file.sync_data().map_err(|code| fs_failure(&format!("syncing `{path}`"), code))?;
        // A file this line may have created is on disk only once its
        // directory entry is.
        if before == 0 {
            sync_parent(&directory, path)?;
        }
    }
    Ok(())
}

/// Sync the directory that holds `path`.
fn sync_parent(directory: &Descriptor, path: &str) -> Result<(), Failure> {
    let parent = match path.rsplit_once('/') {
        Some((parent, _)) => directory
            .open_at(PathFlags::empty(), parent, OpenFlags::DIRECTORY, DescriptorFlags::READ)
            .map_err(|code| fs_failure(&format!("opening the directory of `{path}`"), code))?,
        None => return directory.sync().map_err(|code| fs_failure("syncing the sink's directory", code)),
    };
    parent.sync().map_err(|code| fs_failure(&format!("syncing the directory of `{path}`"), code))
}

/// Rename `path` to `<path>.<unix ms>`, or `<path>.<unix ms>.<n>` if that
/// name is taken.
fn rotate(directory: &Descriptor, path: &str) -> Result<(), Failure> {
    let millis = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or_default();
    let taken = |name: &str| directory.stat_at(PathFlags::empty(), name).is_ok();
    let mut rotated = format!("{path}.{millis}");
    let mut n = 0;
    while taken(&rotated) {
        n += 1;
        rotated = format!("{path}.{millis}.{n}");
    }
    directory
        .rename_at(path, directory, &rotated)
        .map_err(|code| fs_failure(&format!("rotating `{path}` to `{rotated}`"), code))
}

/// The sink's directory: the one preopen, at `/`.
fn directory() -> Result<Descriptor, Failure> {
    get_directories().into_iter().find(|(_, name)| name == "/").map(|(dir, _)| dir).ok_or_else(|| {
        Failure::permanent("the sink has no directory: give it one with `directory:` in its configuration")
    })
}

fn write_all(file: &Descriptor, mut bytes: &[u8]) -> Result<(), String> {
    let stream = file.append_via_stream().map_err(|code| format!("{code:?}"))?;
    let failed = |e: StreamError| match e {
        StreamError::LastOperationFailed(error) => error.to_debug_string(),
        StreamError::Closed => "the stream closed".to_string(),
    };
    while !bytes.is_empty() {
        let permitted = stream.check_write().map_err(failed)?;
        if permitted == 0 {
            stream.subscribe().block();
            continue;
        }
        let (now, rest) = bytes.split_at(bytes.len().min(permitted as usize));
        stream.write(now).map_err(failed)?;
        bytes = rest;
    }
    stream.blocking_flush().map_err(failed)
}
