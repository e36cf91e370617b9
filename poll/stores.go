package poll

// Every store, so that a --db of any kind opens (store.Open) and its
// outages are told apart (store.IsTransient).
import _ "github.com/ratekeeper/ratekeeper/store/all"
