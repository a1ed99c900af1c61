package testsystem

// JobsTable is an authorization table with one label, jobs, of domain
// pay: alice and bob may send the example handlers' noop, fail and flaky,
// non-atomic, at priority med. A test appends its own labels to it, each
// indented as jobs is.
const JobsTable = `
labels:
  jobs:
    domain: pay
    users: [alice, bob]
    mode: non_atomic
    priority: med
    functions:
      noop: {}
      fail: {}
      flaky: {}
`
