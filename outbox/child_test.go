package outbox_test

const childEnv = "RACEFREE_OUTBOX_CHILD"

func child() error { return nil }
