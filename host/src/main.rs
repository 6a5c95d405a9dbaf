// Many small allocations cross threads on the delivery path (request
// parts, body chunks); mimalloc keeps that from contending on one lock.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    ankusa::cli::main()
}
