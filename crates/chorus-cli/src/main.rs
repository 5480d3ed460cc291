//! `chorus`: the one binary operators use (the built-in services).

fn main() {
    chorus_cli::main_with(chorus_apps::ServiceRegistry::builtin());
}
