// The fault proxy lives in a library of its own (the terminal client's demo uses it too); tests keep importing it
// from here.
@_exported import PigeonFaultProxy
