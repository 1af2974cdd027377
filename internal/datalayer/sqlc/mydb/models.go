package mydb

type Account struct {
	ID      int32
	Balance int32
}
