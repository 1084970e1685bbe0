"""What a generation runs with (config) and the models and draft sources it runs on
(Session): shared by the lead, the CLI and the bench."""
