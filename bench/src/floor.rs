//! The least a durable ack can cost on this machine: an axum handler that
//! hands each body to one thread, which writes every body waiting as one
//! write into a file written in full beforehand (so a write changes no
//! file metadata), `fdatasync`s it, and only then answers them all. Group
//! commit and nothing else: no store, no index, no checks. Measured beside
//! the edge, it tells how much of the edge's cost the disk alone sets.

use std::fs::File;
use std::net::SocketAddr;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::mpsc;

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::post;
use tokio::sync::oneshot;

/// Bytes the file is filled with before the run; writes wrap around it.
const FILE_BYTES: u64 = 256 << 20;

type Pending = (Bytes, oneshot::Sender<u64>);

/// Serve the floor handler on a loopback port until `shutdown` resolves.
pub async fn serve(
    dir: &Path,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<SocketAddr> {
    let file = prefilled(&dir.join("fsync-floor"))?;
    let (bodies, rx) = mpsc::channel::<Pending>();
    std::thread::Builder::new().name("bench-fsync-floor".into()).spawn(move || group_commit(&file, &rx))?;
    let app = axum::Router::new().route(
        "/webhooks/{source}",
        post(move |body: Bytes| {
            let bodies = bodies.clone();
            async move {
                let (reply, synced) = oneshot::channel();
                if bodies.send((body, reply)).is_err() {
                    return StatusCode::SERVICE_UNAVAILABLE.into_response();
                }
                match synced.await {
                    Ok(n) => {
                        let id = format!("{n:x}");
                        (StatusCode::CREATED, axum::Json(serde_json::json!({ "status": "accepted", "id": id })))
                            .into_response()
                    }
                    Err(_) => StatusCode::SERVICE_UNAVAILABLE.into_response(),
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).with_graceful_shutdown(shutdown).await });
    Ok(addr)
}

fn prefilled(path: &Path) -> std::io::Result<File> {
    let file = File::options().read(true).write(true).create(true).truncate(true).open(path)?;
    let chunk = vec![0u8; 1 << 20];
    for i in 0..FILE_BYTES / chunk.len() as u64 {
        file.write_all_at(&chunk, i * chunk.len() as u64)?;
    }
    file.sync_all()?;
    Ok(file)
}

/// Take every body waiting, write them as one, sync, answer; a failed
/// write or sync answers nobody (their callers get `503`).
fn group_commit(file: &File, rx: &mpsc::Receiver<Pending>) {
    let mut offset = 0u64;
    let mut next = 0u64;
    let mut buf = Vec::new();
    while let Ok(first) = rx.recv() {
        let mut group = vec![first];
        group.extend(rx.try_iter());
        buf.clear();
        for (body, _) in &group {
            buf.extend_from_slice(body);
        }
        if offset + buf.len() as u64 > FILE_BYTES {
            offset = 0;
        }
        let synced = file.write_all_at(&buf, offset).and_then(|()| file.sync_data());
        offset += buf.len() as u64;
        if synced.is_err() {
            continue;
        }
        for (_, reply) in group {
            let _ = reply.send(next);
            next += 1;
        }
    }
}
