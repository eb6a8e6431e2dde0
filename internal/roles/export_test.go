package roles

// For the tests of the PostgreSQL 16 query on an emulated catalogue.
var (
	JudgeWith = judge
	ReachSQL  = &reachSQL
	Reach16   = &reach16SQL
)
