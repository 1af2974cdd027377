package pgdb

type Account struct {
	ID      int32
	Balance int32
}
