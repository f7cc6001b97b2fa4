//! The `tritium` command-line tool.

fn main() -> std::process::ExitCode {
    tritium::cli::main()
}
