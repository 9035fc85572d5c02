// placeholder: written in issue 15's branch
