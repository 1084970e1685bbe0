"""The drafter channel: its wire protocol, the lead's endpoint and the back's client."""
