fn main() -> std::process::ExitCode {
    ankusa::cli::main()
}
