package pgxdb

type Account struct {
	ID      int32
	Balance int32
}

type Ledger struct {
	ID     int32
	Amount int32
}
