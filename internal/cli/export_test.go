package cli

// MainContext lets the tests run commands with a context they cancel.
var MainContext = mainContext
