package sqlsink

import (
	"context"
	"errors"
	"testing"
)

// TestPoisonForgottenWithItsPartition: the refusals an instance remembers
// (records set aside whole after an abort) are forgotten with their
// partition when it is released, and only theirs; before, they stayed in
// the instance's memory until it ended, and a partition taken back set
// its records aside without trying them again.
func TestPoisonForgottenWithItsPartition(t *testing.T) {
	refused := errors.New("refused")
	in := &instance{epochs: map[string]int64{"t/0": 1, "t/1": 1}, poison: map[string]error{
		poisonKey("t/0", "5"): refused, poisonKey("t/0", "9"): refused, poisonKey("t/1", "5"): refused,
	}}
	if err := in.Release(context.Background(), []string{"t/0"}); err != nil {
		t.Fatal(err)
	}
	if err := in.poisoned("t/0", "5"); err != nil {
		t.Errorf("t/0@5 still remembered as refused after t/0 was released: %v", err)
	}
	if err := in.poisoned("t/0", "9"); err != nil {
		t.Errorf("t/0@9 still remembered as refused after t/0 was released: %v", err)
	}
	if err := in.poisoned("t/1", "5"); err == nil {
		t.Error("t/1@5, whose partition is still held, was forgotten")
	}
	in.forgetPoison([]string{poisonKey("t/1", "5")})
	if len(in.poison) != 0 {
		t.Errorf("poison after forgetting every key: %v", in.poison)
	}
}
