//! Compile once: components are cached on disk as `.cwasm`.
//!
//! The key is the component's SHA-256 plus the engine's compatibility hash
//! (wasmtime version, target, settings), so a file is only ever loaded by an
//! engine able to run it. Files are written to a temporary name and renamed,
//! so a crash never leaves a torn artifact under a real key. The directory
//! must be writable only by the node: loading an artifact trusts its bytes.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use wasmtime::Engine;
use wasmtime::component::Component;

use super::error::ComponentError;

pub struct ComponentCache {
    dir: Option<PathBuf>,
    engine_key: String,
}

/// A compiled component and the SHA-256 of its bytes.
#[derive(Clone)]
pub struct Compiled {
    pub component: Component,
    pub sha256: String,
}

impl ComponentCache {
    /// `dir: None` compiles in memory every time (used by one-off commands).
    pub fn new(engine: &Engine, dir: Option<PathBuf>) -> Self {
        let mut hasher = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        ComponentCache { dir, engine_key: format!("{:016x}", hasher.finish()) }
    }

    /// The component's SHA-256 (the cache key).
    pub fn digest(bytes: &[u8]) -> String {
        crate::digest::sha256_hex(bytes)
    }

    /// `sha256` is [`ComponentCache::digest`] of `bytes`, computed once by the caller.
    pub fn load_or_compile(&self, engine: &Engine, bytes: &[u8], sha256: String) -> Result<Compiled, ComponentError> {
        check_header(bytes)?;
        let path = self.dir.as_ref().map(|d| d.join(format!("{sha256}-{}.cwasm", self.engine_key)));
        if let Some(path) = path.as_ref().filter(|p| p.is_file()) {
            // SAFETY: the file was produced by `Component::serialize` of this
            // engine configuration (its name carries the compatibility hash) and
            // written by this module into a directory only the node writes.
            match unsafe { Component::deserialize_file(engine, path) } {
                Ok(component) => return Ok(Compiled { component, sha256 }),
                Err(e) => tracing::warn!(path = %path.display(), "ignoring unusable cached component: {e:#}"),
            }
        }
        let component = Component::new(engine, bytes).map_err(|e| ComponentError::Compile(format!("{e:#}")))?;
        if let Some(path) = path
            && let Err(e) = store(&component, &path)
        {
            tracing::warn!(path = %path.display(), "cannot cache compiled component: {e}");
        }
        Ok(Compiled { component, sha256 })
    }
}

impl ComponentCache {
    /// Delete `sha256`'s compiled artifact, if this cache keeps one.
    pub fn forget(&self, sha256: &str) {
        let Some(dir) = &self.dir else { return };
        let path = dir.join(format!("{sha256}-{}.cwasm", self.engine_key));
        if let Err(e) = std::fs::remove_file(&path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(path = %path.display(), "cannot delete a compiled component: {e}");
        }
    }
}

fn store(component: &Component, path: &Path) -> std::io::Result<()> {
    let bytes = component.serialize().map_err(|e| std::io::Error::other(format!("{e:#}")))?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

/// Tell a core module, a precompiled artifact or random bytes from a
/// component before handing it to the compiler, for a clearer error.
fn check_header(bytes: &[u8]) -> Result<(), ComponentError> {
    const MAGIC: &[u8] = b"\0asm";
    if bytes.starts_with(MAGIC) && bytes.len() >= 8 {
        return match bytes[4..8] {
            [0x0d, 0x00, 0x01, 0x00] => Ok(()),
            [0x01, 0x00, 0x00, 0x00] => Err(ComponentError::CoreModule),
            _ => Err(ComponentError::NotWasm("unknown WebAssembly binary version".into())),
        };
    }
    if Engine::detect_precompiled(bytes).is_some() {
        return Err(ComponentError::NotWasm("a precompiled artifact; give the component's .wasm instead".into()));
    }
    // WAT text is accepted (handy in tests); anything else is not WebAssembly.
    let text = std::str::from_utf8(bytes).map(str::trim_start);
    match text {
        Ok(t) if t.starts_with('(') || t.starts_with(";;") => Ok(()),
        _ => Err(ComponentError::NotWasm("no WebAssembly magic number".into())),
    }
}
