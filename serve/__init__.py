"""Serving models (`tau serve`): a service's record and revisions (`records`), Ray Serve on the
local Ray head (`local`), and its status as a pure function (`status`)."""
