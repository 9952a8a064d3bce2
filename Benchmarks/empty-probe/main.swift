// An empty Swift executable (the standard library and runtime only): the baseline pigeonkit-bench subtracts from
// pigeonkit-size-probe's stripped size.
print(CommandLine.arguments.count)
