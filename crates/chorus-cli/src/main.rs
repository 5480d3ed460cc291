//! `chorus`: the one binary operators use (the built-in services).

// mimalloc instead of glibc's malloc: allocation and its consolidation were
// ~14 % of a replica's CPU under load (docs/decisions.md, "Allocator").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod allocator_tuning;

fn main() {
    allocator_tuning::keep_freed_memory_for_a_while();
    chorus_cli::main_with(chorus_apps::ServiceRegistry::builtin());
}
