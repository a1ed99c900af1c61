package jsapi_test

import (
	"testing"

	"github.com/tickflow/tickflow/internal/testnats"
)

func TestMain(m *testing.M) {
	testnats.VerifyTestMain(m)
}
