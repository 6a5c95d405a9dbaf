//! C: bindings generated from the project's `wit/` (wit-bindgen's C
//! generator, linked into this binary), every `.c` file of the project
//! compiled by clang against wasi-libc into a preview-1 reactor module,
//! then made a component with the WASI preview-1 adapter of the wasmtime
//! line this host runs.

use std::path::{Path, PathBuf};
use std::process::Command;

use wasi_preview1_component_adapter_provider::{
    WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME, WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
};
use wit_bindgen_core::wit_parser::Resolve;

use super::{BuildError, Job};
use crate::authoring::tools;

const NO_CLANG: &str =
    "install clang, lld and wasi-libc (Debian: `apt install clang lld wasi-libc libclang-rt-dev-wasm32`)";
pub(super) fn build(job: &Job) -> Result<(), BuildError> {
    let bindings = job.scratch.join("bindings");
    let world = job.project.kind().world();
    generate_bindings(&job.project.wit_dir(), world, &bindings)?;
    let sources = c_sources(&job.project.dir)?;
    let core = job.scratch.join(format!("{}.core.wasm", job.project.name()));
    let world = world.replace('-', "_");
    let compiled = tools::run(
        Command::new("clang")
            .args(["--target=wasm32-wasi", "-mexec-model=reactor", "-O2", "-Wall"])
            .arg("-I")
            .arg(&bindings)
            .args(&sources)
            .arg(bindings.join(format!("{world}.c")))
            .arg(bindings.join(format!("{world}_component_type.o")))
            .arg("-o")
            .arg(&core),
        "clang",
        NO_CLANG,
    );
    compiled.map_err(explain_missing_parts)?;
    let module = std::fs::read(&core).map_err(BuildError::io("read", &core))?;
    let component = wit_component::ComponentEncoder::default()
        .module(&module)
        .and_then(|e| e.adapter(WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME, WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER))
        .and_then(|e| e.validate(true).encode())
        .map_err(|e| BuildError::Component(format!("making a component of {}: {e:#}", core.display())))?;
    std::fs::write(&job.out, component).map_err(BuildError::io("write", &job.out))
}

/// `sink_world.h` (or `transform_world.h`), its `.c` and the object
/// carrying the world's type, written into `dir`.
fn generate_bindings(wit: &Path, world: &str, dir: &Path) -> Result<(), BuildError> {
    let bad_wit = |e: anyhow::Error| BuildError::Component(format!("{}: {e:#}", wit.display()));
    let mut resolve = Resolve::default();
    let (package, _) = resolve.push_dir(wit).map_err(bad_wit)?;
    let world = resolve.select_world(&[package], Some(world)).map_err(bad_wit)?;
    let mut files = wit_bindgen_core::Files::default();
    wit_bindgen_c::Opts::default().build().generate(&mut resolve, world, &mut files).map_err(bad_wit)?;
    std::fs::create_dir_all(dir).map_err(BuildError::io("create", dir))?;
    for (name, bytes) in files.iter() {
        let path = dir.join(name);
        std::fs::write(&path, bytes).map_err(BuildError::io("write", &path))?;
    }
    Ok(())
}

/// The project's own `.c` files (its top folder and `src/`), sorted.
fn c_sources(dir: &Path) -> Result<Vec<PathBuf>, BuildError> {
    let mut sources = Vec::new();
    for folder in [dir.to_path_buf(), dir.join("src")] {
        let Ok(entries) = std::fs::read_dir(&folder) else { continue };
        for entry in entries {
            let path = entry.map_err(BuildError::io("read", &folder))?.path();
            if path.extension().is_some_and(|e| e == "c") && path.is_file() {
                sources.push(path);
            }
        }
    }
    sources.sort();
    if sources.is_empty() {
        return Err(BuildError::Component(format!("{} has no .c file to compile", dir.display())));
    }
    Ok(sources)
}

/// clang's errors for a missing sysroot, linker or builtins, named as the
/// packages that bring them.
fn explain_missing_parts(error: BuildError) -> BuildError {
    let BuildError::Failed { output, .. } = &error else { return error };
    let missing = if output.contains("stdio.h' file not found") || output.contains("crt1-reactor.o") {
        Some("wasi-libc (the C library for wasm32-wasi)")
    } else if output.contains("wasm-ld") && (output.contains("not found") || output.contains("doesn't exist")) {
        Some("`wasm-ld` (lld)")
    } else if output.contains("libclang_rt.builtins-wasm32") {
        Some("clang's wasm32 builtins (libclang-rt-dev-wasm32)")
    } else {
        None
    };
    match missing {
        Some(what) => BuildError::Missing { what: what.to_string(), hint: NO_CLANG },
        None => error,
    }
}
