// Package layers holds no code: its test checks the module's import graph
// against the layering CONTRIBUTING.md states, so that a package of the core
// that starts to depend on the examples, the step pipeline or a service it
// should only speak to fails the build's tests rather than a review.
package layers
