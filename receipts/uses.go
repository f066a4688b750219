package receipts

// allowedUses is how many runs may rely on the i-th record an intent
// relied on: its anchor (the first) allows anchorUses when that is more
// than one (a Gera go with uses = N), every other record one. It is the one
// rule of both counts: a journal's replay (state.check, within one host)
// and the fleet's (Fleet, across hosts), so that no record is overspent by
// one count and not the other (TestUsesRuleIsOneAcrossReplayAndFleet).
func allowedUses(i, anchorUses int) int {
	if i == 0 && anchorUses > 1 {
		return anchorUses
	}
	return 1
}
