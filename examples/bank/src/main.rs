//! `bank-node`: Chorus's command line with the bank registered, e.g.
//! `bank-node demo --service bank --executor parallel` or
//! `bank-node sim --service bank --faults all`.

fn main() {
    chorus_cli::main_with(chorus_bank_example::registry());
}
