//! What a failed write means for the delivery.

use ankusa_sdk::Failure;

use crate::bindings::wasi::filesystem::types::ErrorCode;

/// Errors of the directory or file as the sink's class: what an operator
/// must fix (permissions, a read-only mount, a path that is a directory) is
/// permanent; a full disk or an I/O error may pass.
pub fn fs_failure(what: &str, code: ErrorCode) -> Failure {
    let reason = match code {
        // Opened without following links, so none can lead out of the directory.
        ErrorCode::Loop => format!("{what}: it is a symbolic link, which the sink does not follow"),
        _ => format!("{what}: {}", code.message()),
    };
    match code {
        ErrorCode::Access
        | ErrorCode::NotPermitted
        | ErrorCode::ReadOnly
        | ErrorCode::IsDirectory
        | ErrorCode::NotDirectory
        | ErrorCode::NameTooLong
        | ErrorCode::Loop
        | ErrorCode::Invalid => Failure::permanent(reason),
        _ => Failure::transient(reason),
    }
}
