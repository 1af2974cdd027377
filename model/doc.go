// Package model holds the spin model of the commit protocol (xa.pml), the
// runs that check it (runs) and the script that runs them (check). Its test
// model-checks the protocol; docs/model.md says what is modelled and what
// the runs found.
package model
