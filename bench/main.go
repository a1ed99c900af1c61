package main

import (
	_ "github.com/hibiken/asynq"
	_ "github.com/tickflow/tickflow/authz"
)

func main() {}
