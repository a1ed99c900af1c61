package steps_test

import (
	"testing"

	"github.com/tickflow/tickflow/x/steps"
	"github.com/tickflow/tickflow/x/steps/storetest"
)

func TestMemoryStore(t *testing.T) {
	storetest.TestRunStore(t, func(*testing.T) steps.RunStore { return steps.NewMemoryStore() })
}

func TestMemoryStoreZeroValue(t *testing.T) {
	storetest.TestRunStore(t, func(*testing.T) steps.RunStore { return new(steps.MemoryStore) })
}
